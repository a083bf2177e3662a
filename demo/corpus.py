"""The demo's text: Python source already on the machine -- the standard library and the pure-Python
packages the project's own requirements install (PACKAGES) -- without comments and docstrings and
in ast.unparse's canonical layout. About 22 M characters: the old stdlib-only corpus (5 M) was read
two and a half times during training and the target's greedy output looped.

A seeded share of the files (HELD_OUT_SHARE, drawn from every source) never reaches the target's
training text; the demo datasets take their prompts from them, so every prompt is text the target
has not seen, in code of a kind it has.
"""

from __future__ import annotations

import ast
import importlib.util
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path

PACKAGES = (
    "sqlalchemy",
    "pandas",
    "numpy",
    "networkx",
    "huggingface_hub",
    "_pytest",
    "PIL",
    "alembic",
    "anyio",
    "jinja2",
    "packaging",
    "click",
)
HELD_OUT_SHARE = 0.08
SKIPPED = {
    "test",
    "tests",
    "idlelib",
    "lib2to3",
    "turtledemo",
    "ensurepip",
    "site-packages",
    "pydoc_data",
    "__pycache__",
    "config-3.11-x86_64-linux-gnu",
    "tkinter",
    "distutils",
}
END_OF_TEXT = "<|endoftext|>"
SPECIAL_TOKENS = (END_OF_TEXT, "<|system|>", "<|user|>", "<|assistant|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class SourceFile:
    path: Path
    family: str  # the stdlib's top-level module or package, or the installed package's name: `source`

    def text(self) -> str:
        return clean_source(self.path.read_text(encoding="utf-8", errors="replace"))


def clean_source(text: str) -> str:
    """The code without comments and docstrings, in ast.unparse's canonical layout: far more regular
    text than raw source, so a model this small learns it well enough to write sensible code
    greedily (on raw source its greedy output collapsed into "the the the" inside comments)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return ""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    try:
        return ast.unparse(tree) + "\n"
    except RecursionError:
        return ""


def python_files(root: Path, family_of) -> list[SourceFile]:
    """Every .py file under `root` outside tests and bundled tools, sorted by path."""
    files = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if any(part in SKIPPED or part.startswith("test") for part in parts):
            continue
        files.append(SourceFile(path, family_of(parts)))
    return files


def stdlib_files(root: Path | None = None) -> list[SourceFile]:
    root = Path(root or sysconfig.get_paths()["stdlib"])
    return python_files(root, lambda parts: parts[0][:-3] if len(parts) == 1 else parts[0])


def source_files() -> list[SourceFile]:
    """The standard library, then each of PACKAGES that is installed (a missing one is skipped)."""
    files = stdlib_files()
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            files += python_files(Path(spec.origin).parent, lambda _parts, name=name: name)
    return files


def split_files(files: list[SourceFile], seed: int) -> tuple[list[SourceFile], list[SourceFile]]:
    """(training text for the target, held-out files for prompts): a seeded HELD_OUT_SHARE of them."""
    order = list(files)
    random.Random(seed).shuffle(order)
    cut = max(1, int(len(order) * HELD_OUT_SHARE))
    held = {f.path for f in order[:cut]}
    return [f for f in files if f.path not in held], [f for f in files if f.path in held]


def training_text(files: list[SourceFile], budget_chars: int, seed: int) -> list[str]:
    """Whole files in a seeded order until the budget is used, each ended by END_OF_TEXT."""
    order = list(files)
    random.Random(seed).shuffle(order)
    texts, used = [], 0
    for source in order:
        text = source.text()
        if not text or used + len(text) > budget_chars:
            continue
        texts.append(text + END_OF_TEXT)
        used += len(text)
    return texts


def prompt_snippets(
    files: list[SourceFile], count: int, seed: int, chars: int = 2200
) -> list[tuple[str, str]]:
    """`count` (family, text) snippets of `chars` characters starting at a line start in a random
    held-out file, spread evenly over the families (those with a file long enough) so that filtering
    by source means something. The text runs past the prompt: what follows it is the file's own
    continuation, the corpus side of the repetition measure."""
    rng = random.Random(seed)
    by_family: dict[str, list[tuple[SourceFile, str]]] = {}
    for source in files:
        text = source.text()
        if len(text) >= 2 * chars:
            by_family.setdefault(source.family, []).append((source, text))
    families = sorted(by_family)
    rng.shuffle(families)
    snippets = []
    while len(snippets) < count and families:
        family = families[len(snippets) % len(families)]
        _, text = rng.choice(by_family[family])
        start = text.find("\n", rng.randrange(0, len(text) - chars)) + 1
        snippet = text[start : start + chars]
        if snippet.strip():
            snippets.append((family, snippet))
    return snippets


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE tokenizer (the `tokenizers` library) wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=END_OF_TEXT,
        pad_token=END_OF_TEXT,
        additional_special_tokens=list(SPECIAL_TOKENS[1:]),
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped
