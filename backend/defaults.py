"""What the CLI and the dashboard use when the user configures nothing: a bundled pair.

Two pairs ship with SpecLens. The real one, SmolLM2-135M-Instruct with drafts trained on its own answers
(demo/smollm2), is the default once the README's set-up has converted its target and unpacked its drafts
(`python -m demo.smollm2`); until then the 12-layer toy (demo/target, demo/drafts) is, and says so
(`active_pair().fallback`). SPECLENS_DEMO=toy or =smollm2 picks one (the test suite pins the toy, its
fast fixture); SPECLENS_TARGET / SPECLENS_DRAFT point at a team's own checkpoints instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "demo"
DEMO_TARGET = DEMO / "target"
DEMO_DRAFTS = DEMO / "drafts"
DEMO_EVAL = DEMO / "data" / "eval.jsonl"
SMOLLM2 = DEMO / "smollm2"
SET_UP_REAL_PAIR = "python -m demo.smollm2"


@dataclass(frozen=True)
class BundledPair:
    key: str  # what SPECLENS_DEMO names
    label: str
    target: Path
    drafts: Path
    eval_sets: tuple[tuple[str, Path], ...]  # (dataset name, file); the first is the pair's default
    broken: str  # the draft whose declared wiring is not the one it was trained on

    def ready(self) -> bool:
        """Its target and its `final` draft are loadable as plain directories."""
        return all(
            (d / "config.json").is_file() and (d / "model.safetensors").is_file()
            for d in (self.target, self.drafts / "final")
        )

    def draft_dirs(self) -> dict[str, str]:
        """The pair's drafts by name, those whose weights are on disk."""
        if not self.drafts.is_dir():
            return {}
        return {
            p.name: str(p)
            for p in sorted(self.drafts.iterdir())
            if (p / "config.json").is_file() and (p / "model.safetensors").is_file()
        }

    @property
    def eval_set(self) -> Path:
        return self.eval_sets[0][1]


TOY = BundledPair(
    "toy",
    "toy pair (a 12-layer Llama trained on Python source)",
    DEMO_TARGET,
    DEMO_DRAFTS,
    (("demo eval (bundled)", DEMO_EVAL),),
    "miswired",
)
REAL = BundledPair(
    "smollm2",
    "SmolLM2 pair (SmolLM2-135M-Instruct, drafts trained on its own answers)",
    SMOLLM2 / "target",
    SMOLLM2 / "drafts",
    (
        ("SmolLM2: HumanEval + chat, behind the chat template (bundled)", SMOLLM2 / "data" / "eval.jsonl"),
        ("SmolLM2: HumanEval, raw prompts, no template (bundled)", SMOLLM2 / "data" / "eval_raw.jsonl"),
    ),
    "miswired",
)
PAIRS = (REAL, TOY)  # the order the default is chosen in

# Each bundled pair's eval sets, registered on a fresh database (the toy's first: it keeps id 1).
BUNDLED_EVAL_SETS = TOY.eval_sets + REAL.eval_sets


@dataclass(frozen=True)
class ActivePair:
    pair: BundledPair
    fallback: str  # why this is not the real pair, in words ("" when it is, or when it was asked for)


def active_pair() -> ActivePair:
    """The bundled pair the defaults use: SPECLENS_DEMO's, else the real one when set up, else the toy."""
    asked = os.environ.get("SPECLENS_DEMO", "").strip().lower()
    for pair in PAIRS:
        if asked == pair.key:
            return ActivePair(pair, "")
    if REAL.ready():
        return ActivePair(REAL, "")
    return ActivePair(
        TOY, f"the SmolLM2 pair is not set up ({REAL.target} missing: {SET_UP_REAL_PAIR} converts it)"
    )


def pair_of(target_path: str | Path | None) -> BundledPair | None:
    """The bundled pair whose target is this directory (None for a user's own)."""
    if not target_path:
        return None
    try:
        resolved = Path(target_path).expanduser().resolve()
    except (OSError, RuntimeError):
        return None
    return next((p for p in PAIRS if p.target.resolve() == resolved), None)


def default_target() -> str:
    return os.environ.get("SPECLENS_TARGET") or str(active_pair().pair.target)


def _default_pair() -> BundledPair:
    """The default target's bundled pair; the active pair when the target is a user's own."""
    return pair_of(default_target()) or active_pair().pair


def default_draft() -> str:
    """SPECLENS_DRAFT, else `final` of the default pair."""
    return os.environ.get("SPECLENS_DRAFT") or str(_default_pair().drafts / "final")


def default_eval_set() -> str:
    """The samples file a command uses when given none: the default pair's eval set."""
    return str(_default_pair().eval_set)
