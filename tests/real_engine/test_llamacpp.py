"""The replay held against a running llama.cpp (`llama-server --spec-type draft-eagle3`, built by
scripts/install-llamacpp.sh): per-step accepted counts equal llama.cpp's own on every prompt, the last step
included, under the default `llamacpp` reading.

The pair is the real one (SmolLM2-135M-Instruct + demo/smollm2/drafts, `python -m demo.smollm2`): the toy
demo's tokenizer is one llama.cpp's converter does not know ("BPE pre-tokenizer was not recognized"), and
the check says so in one line. The drafts are built here from `final` with non-default nested ids, as a
SpecForge draft trained on other layers would declare them: llama.cpp's converter ignores them and feeds
its defaults HF [2, 15, 27] (the layers `final` was trained on, so the served draft still accepts).

One server for the module (the fixture below) answers every --url check; `--launch` is tested once, on the
written fix, which must be a new conversion and a new server anyway. llama-server runs with one thread
(-t 1: with other work on two cores, -t 2 was up to 25x slower). The module is one file, so one xdist
worker (`--dist loadfile`).

Without llama.cpp these tests skip, unless SPECLENS_REQUIRE_LLAMACPP=1 (tests/run.sh sets it after building
it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from backend.service.llamacpp_server import ROOT, converted, launched_server
from tests.support.cli import cli_json, run_cli
from tests.support.engines import assert_reproduced

pytestmark = pytest.mark.slow
TREE = Path(os.environ.get("SPECLENS_LLAMACPP") or ROOT / ".llamacpp")
REAL = Path("demo/smollm2")
if not (TREE / "build" / "bin" / "llama-server").is_file():
    if os.environ.get("SPECLENS_REQUIRE_LLAMACPP") == "1":
        raise RuntimeError(
            f"SPECLENS_REQUIRE_LLAMACPP=1 but {TREE} has no llama-server (scripts/install-llamacpp.sh)"
        )
    pytest.skip("llama.cpp is not built (bash scripts/install-llamacpp.sh)", allow_module_level=True)
if not (REAL / "target" / "model.safetensors").is_file():
    pytest.skip("the real target is not converted (python -m demo.smollm2)", allow_module_level=True)

TARGET, SAMPLES = str(REAL / "target"), str(REAL / "data" / "eval.jsonl")
NESTED = [4, 14, 26]  # SpecForge's output-of-layer ids: HF [5, 15, 27] as SGLang and SpecForge read them
TRAINED = [5, 15, 27]


@pytest.fixture(scope="module")
def nested(tmp_path_factory) -> Path:
    """`final`'s weights under a config that declares nested ids NESTED (and no top-level list)."""
    folder = tmp_path_factory.mktemp("llamacpp") / "nested"
    shutil.copytree(REAL / "drafts" / "final", folder)
    config = json.loads((folder / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = NESTED
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


@pytest.fixture(scope="module")
def server(nested, tmp_path_factory):
    """llama.cpp serving the nested-ids draft, once for the module: (server, the converter's line)."""
    target_gguf, _ = converted(TARGET)
    draft_gguf, said = converted(str(nested), TARGET)
    log = tmp_path_factory.mktemp("llamacpp-server") / "server.log"
    with launched_server(target_gguf, draft_gguf, 4, log) as up:
        yield up, said, target_gguf, draft_gguf


def check(draft, db: str, *extra: str, limit: int = 3, tokens: int = 96) -> dict:
    return cli_json(
        "serve-check", "--engine", "llamacpp", "--target", TARGET, "--draft", str(draft), "--samples", SAMPLES,
        "--limit", str(limit), "--steps", "4", "--max-new-tokens", str(tokens), "--db", db, "--timeout", "600",
        *extra,
    )  # fmt: skip


def test_llamacpp_feeds_its_defaults_and_is_reproduced_step_for_step_the_last_step_included(
    nested, server, tmp_path
):
    up, said, _, _ = server
    assert said == "EAGLE-3: target_layers = [2, 15, 27]"  # the nested ids are not read
    db = f"sqlite:///{tmp_path}/c.db"
    result = check(nested, db, "--url", up.url, "--server-log", str(up.log_path))
    assert_reproduced(result, "llama.cpp")
    assert result["wiring"] == [2, 15, 27]
    counts = {c for r in result["rows"] for c in r["served_per_step"]}
    assert {0, 4} <= counts and len(counts) >= 4, counts  # rejections, partial and whole acceptances
    # the last steps: fewer drafts than K near n_predict, as llama.cpp drafted them (its trace)
    responses = [json.loads(line) for line in (Path(result["folder"]) / "responses.jsonl").open()]
    assert all(len(r["response"]["tokens"]) == 96 or r["response"]["stop_type"] != "limit" for r in responses)
    # a wrong reading is explained: replayed on the declared (SpecForge) wiring, the check names llama.cpp's
    wrong = check(nested, db, "--url", up.url, "--server-log", str(up.log_path), "--limit", "1",
                  "--aux-hf-indices", ",".join(map(str, TRAINED)))  # fmt: skip
    assert wrong["equal_prompts"] == 0
    assert wrong["explained_by"]["aux_hf_indices"] == [2, 15, 27], wrong["explained_by"]
    assert "llama.cpp ran HF [2, 15, 27]" in wrong["headline"]
    # sampled requests on the same server: each answer replayed along the tokens llama.cpp emitted
    sampled = check(nested, db, "--url", up.url, "--server-log", str(up.log_path), "--limit", "2",
                    "--temperature", "0.7", "--seed", "1")  # fmt: skip
    assert_reproduced(sampled, "llama.cpp")
    assert sampled["sampling"] == {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "seed": 1}
    greedy_tokens = [r["served_token_ids"] for r in result["rows"][:2]]
    assert [r["served_token_ids"] for r in sampled["rows"]] != greedy_tokens  # it did sample
    assert {c for r in sampled["rows"] for c in r["served_per_step"]} != {0}  # and accepted drafts


def test_preflight_names_what_llamacpp_feeds_and_the_written_fix_is_what_it_then_runs(
    nested, server, tmp_path
):
    report = cli_json("preflight", "--target", TARGET, "--draft", str(nested), "--engine", "llamacpp",
                      "--write-fix", str(tmp_path / "fixed"))  # fmt: skip
    finding = next(f for f in report["serving_fixes"] if f["engine"] == "llamacpp")
    assert finding["fed"] == [2, 15, 27] and finding["trained"] == TRAINED
    assert report["fixed_draft"]["config_update"] == {"eagle_aux_hidden_state_layer_ids": TRAINED}
    after = check(tmp_path / "fixed", f"sqlite:///{tmp_path}/c.db", "--launch", limit=1, tokens=48)
    assert_reproduced(after, "llama.cpp")
    assert after["wiring"] == TRAINED
    assert after["launched"]["converter_layers_line"] == f"EAGLE-3: target_layers = {TRAINED}"


def test_a_server_that_dies_hangs_or_is_not_llamacpp_ends_the_check_in_one_line(server, nested, tmp_path):
    up, _, target_gguf, draft_gguf = server
    base = ("serve-check", "--engine", "llamacpp", "--server-log", str(up.log_path), "--target", TARGET,
            "--draft", str(nested), "--samples", SAMPLES, "--limit", "1", "--timeout", "2")  # fmt: skip
    for behaviour, said in (
        ("page", "not JSON (is this llama.cpp's API?)"),
        ("hang", "no answer within 2 s"),
    ):
        with other_server(behaviour) as url:
            done = run_cli(*base, "--url", url, "--db", f"sqlite:///{tmp_path}/{behaviour}.db")
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-1000:]
        assert "llama.cpp" in lines[-1] and url in lines[-1] and said in lines[-1], lines[-1]
    # a server whose context is too short for prompt + new tokens + a draft: said before anything is sent
    from backend.service.llamacpp_server import ServerFlags

    with launched_server(
        target_gguf, draft_gguf, 4, tmp_path / "short.log", ServerFlags(context=256)
    ) as short:
        done = run_cli(*base[:-2], "--timeout", "60", "--server-log", str(short.log_path), "--url", short.url,
                       "--max-new-tokens", "96", "--db", f"sqlite:///{tmp_path}/short.db")  # fmt: skip
    line = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and "slot context is 256 tokens" in line and "-c" in line, line
    # a server killed after its first answer: the first prompt's row is kept, the line names the prompt
    log = tmp_path / "dying.log"
    with launched_server(target_gguf, draft_gguf, 4, log) as dying:
        killer = threading.Thread(
            target=kill_after_first_answer, args=(dying, tmp_path / "artifacts"), daemon=True
        )
        killer.start()
        done = run_cli("serve-check", "--engine", "llamacpp", "--url", dying.url, "--server-log", str(log),
                       "--target", TARGET, "--draft", str(nested), "--samples", SAMPLES, "--limit", "3",
                       "--max-new-tokens", "24", "--timeout", "120", "--db", f"sqlite:///{tmp_path}/b.db")  # fmt: skip
        killer.join(5)
    line = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "llama.cpp" in line and "prompt 1 of 3" in line and "result.json" in line, line
    kept = json.loads(Path(line.rsplit("kept in ", 1)[1].split(")")[0]).read_text())
    assert len(kept["rows"]) == 1 and kept["stopped_at"]["prompt"] == 1


@contextmanager
def other_server(behaviour: str):
    """A server on loopback that is not llama.cpp: it answers every GET and POST with an HTML page
    ("page"), or reads the request and never answers ("hang")."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def answer(self):
            if behaviour == "hang":
                stop.wait(30)
                return
            body = b"<html><body>It works!</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = answer

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        stop.set()
        httpd.shutdown()
        httpd.server_close()


def kill_after_first_answer(server, artifacts: Path, deadline: float = 300.0) -> None:
    """SIGKILL the server's process group once the check has saved its first answer (responses.jsonl:
    written when the answer arrived, before that prompt's replay, so the next prompt meets a dead server)."""
    started = time.monotonic()
    while time.monotonic() - started < deadline:
        if any(f.read_text().strip() for f in artifacts.glob("engine-checks/*/responses.jsonl")):
            os.killpg(server.process.pid, signal.SIGKILL)
            return
        time.sleep(0.05)


def test_a_pair_llamacpp_cannot_convert_is_refused_in_one_line(tmp_path):
    done = run_cli(
        "serve-check", "--engine", "llamacpp", "--launch", "--target", "demo/target", "--draft", "demo/drafts/final",
        "--samples", "demo/data/eval.jsonl", "--limit", "1", "--db", f"sqlite:///{tmp_path}/c.db",
    )  # fmt: skip
    line = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "demo/target" in line and "llama.cpp's converter failed" in line and "pre-tokenizer" in line, line


def test_the_dflash_draft_is_reproduced_step_for_step_and_its_shifted_twin_is_read_as_declared(tmp_path):
    """The bundled DFlash draft (llama-server --spec-type draft-dflash, K = 7: its block_size - 1), 2
    HumanEval prompts x 64 tokens: every step equal, the last included. `dflash-shifted` (the same weights
    declaring each layer one higher) is read as declared by the converter (dflash.target_layers = id + 1)
    and reproduced under that reading too (on this target a one-layer shift costs no measurable
    acceptance: neighbouring layers carry nearly the same state; demo/smollm2/MEASURED.md)."""
    runs = {}
    for name in ("dflash", "dflash-shifted"):
        runs[name] = cli_json(
            "serve-check", "--engine", "llamacpp", "--launch", "--target", TARGET, "--draft", str(REAL / "drafts" / name),
            "--samples", SAMPLES, "--limit", "2", "--steps", "7", "--max-new-tokens", "64",
            "--db", f"sqlite:///{tmp_path}/{name}.db", "--timeout", "600",
        )  # fmt: skip
        assert_reproduced(runs[name], "llama.cpp")
    assert runs["dflash"]["wiring"] == [2, 9, 15, 21, 28]
    assert runs["dflash-shifted"]["wiring"] == [3, 10, 16, 22, 29]
    counts = {c for r in runs["dflash"]["rows"] for c in r["served_per_step"]}
    assert len(counts) >= 3, counts  # rejections and acceptances of several lengths
    # --spec-draft-n-max 15 past the trained block: llama.cpp clamps it to 7 (a log line), the replay too
    clamped = cli_json(
        "serve-check", "--engine", "llamacpp", "--launch", "--target", TARGET, "--draft", str(REAL / "drafts" / "dflash"),
        "--samples", SAMPLES, "--limit", "1", "--steps", "15", "--max-new-tokens", "32",
        "--db", f"sqlite:///{tmp_path}/clamped.db", "--timeout", "600",
    )  # fmt: skip
    assert_reproduced(clamped, "llama.cpp")
    # a sampled DFlash answer (llama.cpp drafts the block greedily and verifies by sample-and-match)
    sampled = cli_json(
        "serve-check", "--engine", "llamacpp", "--launch", "--target", TARGET, "--draft", str(REAL / "drafts" / "dflash"),
        "--samples", SAMPLES, "--limit", "2", "--steps", "7", "--max-new-tokens", "64", "--temperature", "0.7",
        "--seed", "3", "--db", f"sqlite:///{tmp_path}/sampled.db", "--timeout", "600",
    )  # fmt: skip
    assert_reproduced(sampled, "llama.cpp")
    assert sampled["rows"][0]["served_token_ids"] != runs["dflash"]["rows"][0]["served_token_ids"]
