"""Where-lost's input and answer as values: a stored run as it is read (LostRun), and what is found over
runs, per draft (position rates, groups, rejected tokens, calibration, the threshold what-if), each number
with its definition; the pages, the CLI and the JSON read these."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from backend.diagnostics.where_lost_tree import SampledPosition, TreeDepth
from backend.plain import Plain
from backend.run.metrics import LOST_TERMS, definitions

# Every number's definition, from the one DEFINITIONS (backend/run/metrics.py, "lost_*" keys), by
# the short names this module's JSON and the pages use.
DEFINITIONS = definitions({name: f"lost_{name}" for name in LOST_TERMS})


@dataclass(frozen=True)
class LostRun:
    """One stored run as this module reads it: its steps (records with drafted_ids, accepted_count,
    committed_ids, target_argmax_ids, target_argmax_probs, draft_probs, position), its sample's source,
    and whether it drafted a greedy chain (the threshold what-if reads those only)."""

    run_id: int
    steps: Sequence
    source: str = "typed prompt"
    greedy_chain: bool = True
    prompt_ids: Sequence[int] = ()  # what the spans start from (a template's <think>, an open fence)
    draft_method: str = "eagle3"  # dflash: a block's K drafts come from one forward


DFLASH_POSITIONS = (
    "DFlash runs: a position is a slot of the block's one forward, not a chain step; slot i's draft is made "
    "without knowing whether slots before it are right, so its rate is P(a >= i) of a block, and a late slot "
    "can be right where an earlier one was not (the acceptance stops at the first miss)"
)


@dataclass(frozen=True)
class PositionRate(Plain):
    position: int  # i = 1..K
    steps: int  # verify steps that drafted at least i tokens
    marginal: float | None  # pooled P(a >= i)
    marginal_mean: float | None  # mean over samples of each one's P(a >= i)
    marginal_ci95: list[float] | None
    conditional: float | None  # P(a >= i | a >= i-1), pooled
    samples: int
    rejected_at: list[list[int]] = field(default_factory=list)  # [run id, step index] of steps rejecting d_i
    rejections: int | None = None  # how many steps rejected d_i (rejected_at lists the first EXAMPLES)


@dataclass(frozen=True)
class GroupRate(Plain):
    group: str
    attempts: int
    accepted: int
    share: float  # of all attempts
    rate: float | None  # None: too few attempts to judge
    ci95: list[float] | None
    samples: int
    note: str = ""
    # [run id, step index, draft position j, accepted 0/1] of the group's attempts, rejections first
    examples: list[list[int]] = field(default_factory=list)


@dataclass(frozen=True)
class RejectedToken(Plain):
    token_id: int
    text: str
    kind: str
    rejections: int
    examples: list[list[int]]  # [run id, step index], the first few


@dataclass(frozen=True)
class CalibrationBin(Plain):
    low: float
    high: float
    attempts: int
    mean_probability: float | None
    acceptance: float | None


@dataclass(frozen=True)
class Calibration(Plain):
    position: int | None  # None: every position together
    attempts: int
    ece: float | None
    bins: list[CalibrationBin]
    brier: float | None = None  # DEFINITIONS["brier"]
    auroc: float | None = None  # DEFINITIONS["auroc"]


@dataclass(frozen=True)
class ThresholdRow(Plain):
    threshold: float | None  # None: as stored (no threshold)
    accept_length: float | None  # mean over steps of min(a, kept) + 1
    drafts_per_step: float | None
    wasted_drafts: int  # drafted and rejected or never judged
    accepted_lost: int  # accepted drafts the threshold would not have drafted
    speedup: float | None = None  # predicted over the target alone (threshold_whatif.py); None: no timings


@dataclass(frozen=True)
class DraftLosses(Plain):
    name: str
    runs: int
    verify_steps: int
    attempts: int
    by_position: list[PositionRate]
    by_kind: list[GroupRate]
    top_rejected: list[RejectedToken]
    by_confidence: list[GroupRate]
    by_context: list[GroupRate]
    by_source: list[GroupRate]
    by_span: list[GroupRate]
    calibration: list[Calibration]
    threshold_whatif: list[ThresholdRow]
    notes: list[str] = field(default_factory=list)
    by_entropy: list[GroupRate] = field(default_factory=list)  # runs stored before entropies: empty
    by_block: list[GroupRate] = field(default_factory=list)  # code vs prose; empty: no fenced code
    run_ids: list[int] = field(default_factory=list)  # the runs counted (what `lost --runs` takes)
    tree_depths: list[TreeDepth] = field(default_factory=list)  # tree steps per depth and branch; [] chains
    sampled_positions: list[SampledPosition] = field(default_factory=list)  # sampled chains; [] greedy


@dataclass(frozen=True)
class WhereLost(Plain):
    drafts: list[DraftLosses]
    definitions: dict[str, str] = field(default_factory=lambda: dict(DEFINITIONS))
