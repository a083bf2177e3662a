"""The records the engine yields, the store persists and the pages render: one type per concept.

`StepRecord` is built once per verify step by `replay()`; `db.store.get_steps` returns the same type
(with the tensor fields left empty: those live in the run's safetensors artifact). Importing this
module does not import torch, so pages and the store can use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from backend.plain import Plain, plain

if TYPE_CHECKING:
    import torch

# Every long job reports progress the same way: the fraction done (0..1) and what is happening.
Progress = Callable[[float, str], None]


def no_progress(_fraction: float, _message: str) -> None:
    """The Progress to pass when nobody is watching."""


@dataclass
class PrefillRecord:
    prompt_ids: list[int]
    first_token: int  # the target's greedy token after the prompt: output_ids[0]
    prefill_ms: float
    aux_features: torch.Tensor | None  # [n, 3*Ht] fused features of the prompt positions


@dataclass(frozen=True)
class StepTree(Plain):
    """A verify step's draft tree, stored with the step and printed by `replay --json` ("tree"). A chain
    is a tree with one child per node (a greedy one has no draws). Per node: token, parent (-1: a child
    of the root x_n), score (the path's draft probability), depth, draft and target probabilities,
    P(accepted | parent accepted), the draw and the decision (accepted, rejected, unreached). `argmax` /
    `argmax_probs`: the target's argmax per verify row (0 = the root), `target_entropies` the entropy of
    its distribution there. Every key but the first two has a
    default: a tree stored before a key was added still reads."""

    tokens: list[int]
    parents: list[int]
    scores: list[float] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    accepted_path: list[int] = field(default_factory=list)  # node indices, the root's child first
    draft_probs: list[float] = field(default_factory=list)
    target_probs: list[float] = field(default_factory=list)
    accept_probs: list[float] = field(default_factory=list)
    draws: list[float | None] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    expected_accepted: float | None = None  # the expected accepted count, sum of path products
    argmax: list[int] = field(default_factory=list)
    argmax_probs: list[float] = field(default_factory=list)
    final_draw: float | None = None
    target_entropies: list[float] = field(default_factory=list)  # nats, per verify row, temperature 1


@dataclass
class StepRecord:
    """One verify step (docs/reference.md §4). Token ids are target-vocab ids."""

    step_index: int
    position: int  # position of the pending token x_n (verify row 0)
    pending_token: int
    drafted_ids: list[int]  # d_1..d_K
    accepted_count: int  # a: drafts accepted, 0..K
    bonus_id: int  # argmax of verify row a: the target's own token after the accepted drafts
    committed_ids: list[int]  # tokens this step added to the output (a + 1, fewer at EOS / the limit)
    target_argmax_ids: list[int]  # argmax of verify rows 0..K
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    draft_probs: list[float] = field(default_factory=list)  # draft probability of each d_j
    draft_top_ids: list[list[int]] = field(default_factory=list)  # top alternatives per d_j
    draft_top_probs: list[list[float]] = field(default_factory=list)
    target_argmax_probs: list[float] = field(default_factory=list)
    # verify rows 0..a (those the output read) whose top two logits nearly tie (sampling.near_tie_rows)
    near_tie_rows: list[int] = field(default_factory=list)
    # The step's draft tree (StepTree). For a tree, drafted_ids and the other chain-shaped fields
    # describe its main path: the accepted path, then the draft's favourite child down to a leaf.
    tree: StepTree | None = None
    # Tensors (recorded runs only; kept in the run's artifact, not in SQL):
    aux_features: torch.Tensor | None = None  # [c, 3*Ht] fused features of positions n..n+c-1
    # [K, H] draft output hidden that proposed each d_j (rows past a shorter draft: zeros, never read)
    draft_hidden: torch.Tensor | None = None

    @property
    def is_verify_step(self) -> bool:
        """False for a plain decode (no drafts: llama.cpp's last token), which no engine counts."""
        return bool(self.drafted_ids)

    @property
    def rejection_index(self) -> int | None:
        """Index into drafted_ids of the first rejected draft (None when all K were accepted)."""
        return self.accepted_count if self.accepted_count < len(self.drafted_ids) else None


def verify_counts(steps) -> list[int]:
    """The accepted count a of each verify step, in order: what every acceptance metric is computed from
    (metrics.acceptance_metrics); plain decodes are not verify steps."""
    return [s.accepted_count for s in steps if s.is_verify_step]


# The StepRecord fields that are columns of the steps table (a run keeps its near-ties' positions in
# its metrics instead: metrics.run_metrics).
STORED_STEP_FIELDS = tuple(
    name
    for name in StepRecord.__dataclass_fields__
    if name not in ("aux_features", "draft_hidden", "near_tie_rows")
)


def stored_fields(step: StepRecord) -> dict:
    """The step's columns as the store writes them (its tree as JSON-ready data)."""
    return {**{name: getattr(step, name) for name in STORED_STEP_FIELDS}, "tree": plain(step.tree)}


def stored_step(columns: dict) -> StepRecord:
    """A step read back from its columns (`stored_fields`), its tree typed."""
    tree = columns.get("tree")
    return StepRecord(**{**columns, "tree": None if tree is None else StepTree.from_dict(tree)})
