"""The demo's text: the Python standard library's own source, which is on every machine, without
comments and docstrings and in ast.unparse's canonical layout.

Module families listed in HELD_OUT never reach the target's training text; the demo datasets take
their prompts from them, so every prompt is text the target has not seen.
"""

from __future__ import annotations

import ast
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path

HELD_OUT = ("asyncio", "email", "json", "http", "logging", "xml", "unittest", "concurrent")
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
    family: str  # top-level module or package name: the dataset's `source` value

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


def stdlib_files(root: Path | None = None) -> list[SourceFile]:
    """Every .py file of the standard library outside tests and bundled tools, sorted by path."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if any(part in SKIPPED or part.startswith("test") for part in parts):
            continue
        family = parts[0][:-3] if len(parts) == 1 else parts[0]
        files.append(SourceFile(path, family))
    return files


def split_files(files: list[SourceFile]) -> tuple[list[SourceFile], list[SourceFile]]:
    """(training text for the target, held-out files for prompts)."""
    held = [f for f in files if f.family in HELD_OUT]
    return [f for f in files if f.family not in HELD_OUT], held


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
    files: list[SourceFile], count: int, seed: int, chars: int = 700
) -> list[tuple[str, str]]:
    """`count` (family, text) snippets starting at a line start in a random held-out file, spread
    evenly over the families so that filtering by source means something."""
    rng = random.Random(seed)
    by_family: dict[str, list[SourceFile]] = {}
    for source in files:
        by_family.setdefault(source.family, []).append(source)
    families = sorted(by_family)
    snippets = []
    while len(snippets) < count:
        family = families[len(snippets) % len(families)]
        text = rng.choice(by_family[family]).text()
        if len(text) < 2 * chars:
            continue
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
