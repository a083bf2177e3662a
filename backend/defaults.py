"""What the CLI and the dashboard use when the user configures nothing: the bundled demo pair.

SPECLENS_TARGET / SPECLENS_DRAFT point elsewhere (e.g. a team's own checkpoints).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "demo"
DEMO_TARGET = DEMO / "target"
DEMO_DRAFTS = DEMO / "drafts"
DEMO_EVAL = DEMO / "data" / "eval.jsonl"
SMOLLM2 = DEMO / "smollm2"

# Each bundled pair's eval sets, registered on a fresh database (the toy's first: it keeps id 1).
BUNDLED_EVAL_SETS = (
    ("demo eval (bundled)", DEMO_EVAL),
    ("SmolLM2: HumanEval + chat, behind the chat template (bundled)", SMOLLM2 / "data" / "eval.jsonl"),
    ("SmolLM2: HumanEval, raw prompts, no template (bundled)", SMOLLM2 / "data" / "eval_raw.jsonl"),
)


def default_target() -> str:
    return os.environ.get("SPECLENS_TARGET") or str(DEMO_TARGET)


def default_draft() -> str:
    return os.environ.get("SPECLENS_DRAFT") or str(DEMO_DRAFTS / "final")


def demo_drafts() -> dict[str, str]:
    """The bundled drafts by name (final, epoch1, miswired), those present on disk."""
    if not DEMO_DRAFTS.is_dir():
        return {}
    return {p.name: str(p) for p in sorted(DEMO_DRAFTS.iterdir()) if (p / "config.json").is_file()}
