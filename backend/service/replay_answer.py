"""What a replay answers the CLI (`replay --json`): the run's tokens, steps and metrics with their
definitions, the wiring and the reading it ran, typed; its keys are the JSON's."""

from __future__ import annotations

from dataclasses import dataclass, field

from backend.plain import Plain
from backend.run.metrics import DEFINITIONS
from backend.run.records import verify_counts
from backend.run.request import ReplayRequest

DEFINED = (
    "mean_accept_length",
    "per_position_marginal",
    "per_position_conditional",
    "acceptance_rate",
    "self_disagreement_per_1000",
    "expected_accept_length",
)


@dataclass(frozen=True)
class StepAnswer(Plain):
    drafted: list[int]
    accepted: int
    bonus: int | None
    tree: object = None  # a tree step's DraftTree (None for a chain)


@dataclass(frozen=True)
class ReplayAnswer(Plain):
    run_id: int
    output_ids: list[int]
    steps: list[StepAnswer]
    mean_accept_length: float | None
    accepted_per_step: list[int]
    per_position_marginal: tuple
    per_position_conditional: tuple
    aux_hf_indices: list[int]
    wiring_source: str
    engine: str
    acceptance_rate: float | None
    accept_histogram: tuple
    num_steps: int
    device: str | None
    dtype: str | None
    self_disagreement_per_1000: float | None
    mode: str
    topk: int
    num_draft_tokens: int | None
    requested: (
        dict  # the tree flags as asked (`mode`, `topk`, `num_draft_tokens`: as SGLang's rules left them)
    )
    sampling: dict
    draft_attention: str | None
    expected_accept_length: float | None
    definitions: dict = field(default_factory=lambda: {k: DEFINITIONS[k] for k in DEFINED})


def replay_answer(request: ReplayRequest, outcome) -> ReplayAnswer:
    """The answer of `outcome` (a `jobs.ReplayOutcome`) to `request`."""
    metrics, resolved = outcome.metrics, outcome.resolved
    return ReplayAnswer(
        run_id=outcome.run_id,
        output_ids=outcome.output_ids,
        steps=[StepAnswer(s.drafted_ids, s.accepted_count, s.bonus_id, s.tree) for s in outcome.steps],
        mean_accept_length=metrics.mean_accept_length,
        accepted_per_step=verify_counts(outcome.steps),
        per_position_marginal=metrics.per_position_marginal,
        per_position_conditional=metrics.per_position_conditional,
        aux_hf_indices=list(outcome.wiring.aux_hf_indices),
        wiring_source=outcome.wiring.source,
        engine=outcome.engine,
        acceptance_rate=metrics.acceptance_rate,
        accept_histogram=metrics.accept_histogram,
        num_steps=request.num_steps,
        device=resolved.device,
        dtype=resolved.dtype,
        self_disagreement_per_1000=metrics.self_disagreement_per_1000,
        mode=resolved.mode,
        topk=resolved.topk,
        num_draft_tokens=resolved.num_draft_tokens,
        requested={k: getattr(request, k) for k in ("num_steps", "topk", "num_draft_tokens")},
        sampling={
            **{k: getattr(request, k) for k in ("temperature", "top_p", "top_k", "seed")},
            "sampling_rule": resolved.sampling_rule,
        },
        draft_attention=resolved.draft_attention,
        expected_accept_length=metrics.expected_accept_length,
    )
