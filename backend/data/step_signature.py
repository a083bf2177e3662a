"""The first verify step against the later ones, over requests with per-step accepted counts.

A disaggregated decode node that starts drafting from a wrong hand-off (mock hidden states, sglang#7242
and sglang#10616) accepts nothing on the first verify step after prefill and normally afterwards: the
first step's mean accepted count falls far below the later steps'. A healthy draft shows no such gap
(its first step drafts from the prefill's own features)."""

from __future__ import annotations

from dataclasses import dataclass

from backend.plain import Plain

MIN_REQUESTS = 3  # fewer requests say nothing about a per-request first step
GAP = 0.5  # the first step's mean below this share of the later steps' mean
LATER_AT_LEAST = 0.5  # ... when the later steps accept at least this many drafts on average

DEFINITION = (
    "first: mean accepted drafts on each request's first verify step; later: mean over every later "
    "step (step-weighted); flagged when first < 0.5 x later, later >= 0.5, over >= 3 requests"
)


@dataclass(frozen=True)
class FirstStepSignature(Plain):
    """The first verify step's mean accepted count against the later steps' (first_step_signature)."""

    requests: int
    first_step_accepted_mean: float
    later_steps_accepted_mean: float
    first_step_zero_share: float
    signature: str | None  # "disaggregation" when flagged
    message: str | None  # what the flag means, when flagged
    definition: str = DEFINITION


@dataclass(frozen=True)
class DraftLengthSignature(Plain):
    """The numbers of drafts the verify steps ran (draft_length_signature)."""

    requests: int
    draft_lengths: list[int]
    signature: str | None  # "synthetic-acceptance" when K varied
    message: str | None  # what it means, when K varied
    definition: str = (
        "the draft lengths with at least one verify step, from acceptance_histogram_by_draft_length "
        "or per_step_drafted"
    )


def first_step_signature(requests) -> FirstStepSignature | None:
    """None without per-step counts on at least MIN_REQUESTS requests of two or more steps."""
    rows = [
        r.per_step_accepted
        for r in requests
        if r.status == "ok" and r.per_step_accepted is not None and len(r.per_step_accepted) >= 2
    ]
    if len(rows) < MIN_REQUESTS:
        return None
    first = sum(r[0] for r in rows) / len(rows)
    later_steps = sum(len(r) - 1 for r in rows)
    later = sum(sum(r[1:]) for r in rows) / later_steps
    flagged = later >= LATER_AT_LEAST and first < GAP * later
    return FirstStepSignature(
        requests=len(rows),
        first_step_accepted_mean=first,
        later_steps_accepted_mean=later,
        first_step_zero_share=sum(r[0] == 0 for r in rows) / len(rows),
        signature="disaggregation" if flagged else None,
        message=(
            f"the first verify step accepts {first:.2f} drafts on average against {later:.2f} on later steps "
            f"({len(rows)} requests): the signature of a decode node drafting from a wrong prefill hand-off "
            "(sglang#7242, fixed by sglang#10547 and sglang#10801)"
            if flagged
            else None
        ),
    )


def draft_length_signature(requests) -> DraftLengthSignature | None:
    """The numbers of drafts the verify steps ran, over the requests that say (vLLM's
    acceptance_histogram_by_draft_length / per_step_drafted): more than one, and K changed while
    serving (num_speculative_tokens_per_batch_size, or speculation shortened under load), so the accept
    length mixes several K. None where no request says."""
    told = [r.draft_lengths for r in requests if r.status == "ok" and r.draft_lengths]
    if not told:
        return None
    lengths = sorted({k for r in told for k in r})
    varies = len(lengths) > 1
    return DraftLengthSignature(
        requests=len(told),
        draft_lengths=lengths,
        signature="synthetic-acceptance" if varies else None,
        message=(
            f"verify steps drafted {', '.join(map(str, lengths))} tokens over {len(told)} requests: K changed while "
            "serving (vLLM's num_speculative_tokens_per_batch_size, or speculation shortened under load), so the "
            "accept length mixes several K and a replay at one K does not reproduce it"
            if varies
            else None
        ),
    )
