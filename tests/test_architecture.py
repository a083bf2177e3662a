"""The layering rule of backend/__init__.py, checked on the source tree (imports at any depth)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# each may import only itself and those before
LAYERS = ["run", "drafts", "target", "engine", "data", "diagnostics", "service", "cli"]
TORCH_FREE_ROOMS = ("backend.run",)  # the run's vocabulary: db/ and the pages import it whole
PAGE_BACKEND_ALLOWED = {
    "backend",
    "backend.defaults",
    "backend.diagnostics.mismatch",
    "backend.diagnostics.whatif",
}
DB_BACKEND_ALLOWED = {"backend", "backend.data.samples"}
HEAVY = ("torch", "transformers", "safetensors")


def imported_modules(source: str) -> set[str]:
    """Every module an import statement names, at any depth (function-level imports included)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def in_room(module: str, rooms=TORCH_FREE_ROOMS) -> bool:
    return any(module == room or module.startswith(room + ".") for room in rooms)


def python_files(*folders: str) -> list[Path]:
    return [p for folder in folders for p in sorted((REPO / folder).rglob("*.py"))]


def layer_of(path: Path) -> str | None:
    parts = path.relative_to(REPO / "backend").parts
    if parts[0] in LAYERS:
        return parts[0]
    return "cli" if parts[0] in ("cli", "__main__.py") else None


def backend_layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "backend" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in LAYERS else None


def violations_of_layers(path: Path, source: str) -> list[str]:
    mine = layer_of(path)
    found = []
    for module in imported_modules(source):
        other = backend_layer(module)
        if mine and other and LAYERS.index(other) > LAYERS.index(mine):
            found.append(f"{path.relative_to(REPO)} ({mine}) imports {module} ({other})")
        if module.split(".")[0] == "db" and mine not in ("service", "cli"):
            found.append(
                f"{path.relative_to(REPO)} imports {module}: only backend.service and backend.cli touch db"
            )
        if module.split(".")[0] == "streamlit":
            found.append(f"{path.relative_to(REPO)} imports streamlit")
    return found


def violations_of_pages(path: Path, source: str) -> list[str]:
    found = []
    for module in imported_modules(source):
        root = module.split(".")[0]
        if root in HEAVY or root == "db":
            found.append(f"{path.relative_to(REPO)} imports {module}")
        if (
            root == "backend"
            and module not in PAGE_BACKEND_ALLOWED
            and not module.startswith("backend.service")
            and not in_room(module)
        ):
            parent = module.rsplit(".", 1)[0]
            if parent not in PAGE_BACKEND_ALLOWED and not parent.startswith("backend.service"):
                found.append(
                    f"{path.relative_to(REPO)} imports {module}: pages reach models through backend.service"
                )
    if ".submit(" in source:
        found.append(
            f"{path.relative_to(REPO)} submits its own task body: use a backend.service.tasks.start_*"
        )
    return found


def test_backend_layers_import_only_downwards():
    found = [v for path in python_files("backend") for v in violations_of_layers(path, path.read_text())]
    assert found == []


def test_db_imports_no_model_code_and_no_streamlit():
    found = []
    for path in python_files("db"):
        for module in imported_modules(path.read_text()):
            root = module.split(".")[0]
            if root == "streamlit" or (
                root == "backend"
                and not in_room(module)
                and module not in DB_BACKEND_ALLOWED
                and module.rsplit(".", 1)[0] not in DB_BACKEND_ALLOWED
            ):
                found.append(f"{path.relative_to(REPO)} imports {module}")
    assert found == []


def _graph(folder: str) -> dict[str, set[str]]:
    """module -> the modules of the same backend folder it imports (at any depth, TYPE_CHECKING too)."""
    package = f"backend.{folder}"
    names = {p.stem for p in (REPO / "backend" / folder).glob("*.py") if p.stem != "__init__"}
    graph = {}
    for name in names:
        source = (REPO / "backend" / folder / f"{name}.py").read_text()
        graph[name] = {m.split(".")[2] for m in imported_modules(source) if m.startswith(package + ".")} & (
            names - {name}
        )
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import circle of a graph, as the path that closes it (depth-first)."""
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for other in sorted(graph[node]):
            if state.get(other) == "open":
                found.append(path[path.index(other) :] + [other] if other in path else [node, other])
            elif other not in state:
                visit(other, [*path, other])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_no_import_circle_inside_a_folder():
    """Each backend folder's modules import one another in one direction (a circle is two concepts
    that need each other: one room too many or one too few)."""
    assert circles({"a": {"b"}, "b": {"a"}}) and not circles({"a": {"b"}, "b": set()})  # not vacuous
    found = {folder: circles(_graph(folder)) for folder in LAYERS}
    assert {folder: c for folder, c in found.items() if c} == {}


def test_the_run_room_loads_no_torch():
    """The run's vocabulary (what db/ and the pages import) loads neither torch nor transformers."""
    modules = [f"backend.run.{p.stem}" for p in sorted((REPO / "backend" / "run").glob("*.py"))]
    assert heavy_loaded_by(modules) == {}


def test_pages_and_ui_are_thin():
    files = python_files("pages", "ui") + [REPO / "app.py"]
    found = [v for path in files for v in violations_of_pages(path, path.read_text())]
    assert found == []


def test_the_checks_catch_violations():
    """The rules above are not vacuous: each flags a typical violation."""
    engine_file = REPO / "backend" / "engine" / "replay.py"
    assert violations_of_layers(engine_file, "from backend.service import jobs\n")
    assert violations_of_layers(engine_file, "def f():\n    from db import store\n")
    assert violations_of_layers(REPO / "backend" / "diagnostics" / "probe.py", "import streamlit as st\n")
    page = REPO / "pages" / "2_Decode.py"
    assert violations_of_pages(page, "def f():\n    import torch\n")
    assert violations_of_pages(page, "from backend.engine.replay import replay\n")
    assert violations_of_pages(page, "from db import store\n")
    assert violations_of_pages(page, "tasks.MANAGER.submit('x', 'y', work)\n")
    assert not violations_of_pages(
        page, "from backend.service import tasks\nfrom backend.run.wiring import Wiring\n"
    )


def heavy_loaded_by(modules: list[str]) -> dict[str, str]:
    """Import `modules` in order in a fresh interpreter: each HEAVY module it loaded, with the first of
    `modules` whose import loaded it. A name that is not a module (`pkg.mod.name` from a from-import)
    imports its parent."""
    script = (
        "import importlib, json, sys\n"
        "first = {}\n"
        f"for name in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError:\n"
        "        importlib.import_module(name.rsplit('.', 1)[0])\n"
        f"    first.update({{m: name for m in {HEAVY!r} if m in sys.modules and m not in first}})\n"
        "print(json.dumps(first))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_what_pages_import_loads_no_torch():
    """Import every backend/ui module the pages and ui name (at any depth) in a fresh interpreter:
    neither torch nor transformers may be loaded by them."""
    modules = set()
    for path in python_files("pages", "ui") + [REPO / "app.py"]:
        for module in imported_modules(path.read_text()):
            if module.split(".")[0] in ("backend", "ui"):
                modules.add(module)
    assert heavy_loaded_by(sorted(modules)) == {}


def test_collecting_the_tests_loads_no_torch():
    """conftest's promise: importing every test module (what collection runs) loads neither torch nor
    transformers; the models are imported inside the fixtures and tests that need them."""
    modules = [
        ".".join(path.relative_to(REPO).with_suffix("").parts)
        for path in python_files("tests")
        if path.name.startswith("test_") or path.name == "conftest.py"
    ]
    assert heavy_loaded_by(modules) == {}


ENGINE_NAMES = {"vllm", "vllm-v2", "llamacpp", "llama.cpp", "vLLM"}
# where the engines beside the replay are used: each is asked through served_engines' interface
SERVED_USERS = {
    "backend/service/engine_check.py": None,
    "backend/service/served_engines.py": None,
    "backend/service/tasks.py": None,
    "ui/diagnostics/served.py": None,
    "backend/cli/serving.py": ("cmd_serve_check", "cmd_engine_check", "server_options"),
}


def name_branches(source: str, functions=None) -> list[int]:
    """Lines comparing a value with an engine's name (==, !=, in), in `functions` (None: anywhere)."""
    tree = ast.parse(source)
    scopes = (
        [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in functions]
        if functions
        else [tree]
    )
    found = []
    for scope in scopes:
        for node in ast.walk(scope):
            if isinstance(node, ast.Compare):
                names = [c for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in ENGINE_NAMES]
                if names:
                    found.append(node.lineno)
    return found


def test_a_served_engine_is_branched_on_in_its_own_module_only():
    """vLLM and llama.cpp beside the replay are asked through one interface (served_engines.ServedEngine):
    launch, connect, ask, what is missing here; the code that runs them never tests their names."""
    assert name_branches('def f(e):\n    return e == "llamacpp"\n', ("f",))  # the rule is not vacuous
    found = {
        path: lines
        for path, functions in SERVED_USERS.items()
        if (lines := name_branches((REPO / path).read_text(), functions))
    }
    assert found == {}


def test_every_form_asks_k_and_max_new_tokens_as_the_request_declares_them():
    """One label and one range per setting: a form asks K and max new tokens through
    ui/numbers.setting_number (the ReplayRequest field's widget), never with its own label and limits.
    Two K fields are not a replay's: the what-if's (another K to predict from a run) and the server's K that
    a per-request file may not state (0 = unknown); they stay apart. Compare's side B takes the form's K
    unless it names its own (0 = the same K): the range is the request's, its 0 is not a K."""
    hand_written = []
    for path in python_files("ui", "pages"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "whole"
                and len(node.args) > 1
            ):
                label = node.args[1]
                if isinstance(label, ast.Constant) and str(label.value).startswith(("K", "Max new tokens")):
                    hand_written.append(f"{path.relative_to(REPO)} {label.value!r}")
    assert sorted(hand_written) == [
        "ui/compare/form.py 'K B (0: the same K)'",
        "ui/diagnostics/whatif.py 'K (steps)'",
        "ui/server_requests.py 'K (num speculative tokens), where the file does not say (0 = unknown)'",
    ]
