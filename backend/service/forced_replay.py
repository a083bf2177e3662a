"""A replay along tokens the target did not choose: an engine's sampled answer, replayed greedily over a
forced trace (backend/target/forced_trace.py says why that reproduces the engine's accepted counts), and
what a sampled engine check says of it."""

from __future__ import annotations

from dataclasses import replace

from backend import BadInput
from backend.run.request import ReplayRequest
from backend.service.engine_check_result import PromptCheck


def forced_replay(request: ReplayRequest, tokens: list[int], source: str, db_url: str | None):
    """`request` (its prompt, pair, K, reading, wiring) replayed along `tokens`: greedy, over the forced
    trace of the prompt and the tokens (every layer, so a candidate wiring replays over it too), stored
    as a run; the ReplayOutcome. The target loaded here computes the trace and lends the draft its
    embeddings (and head): the pair stays loaded between an engine check's prompts."""
    from backend.service import models, traces
    from backend.service.checkpoints import checked_override
    from backend.service.database import open_database
    from backend.service.jobs import run_plan
    from backend.service.plan import resolve
    from backend.target.forced_trace import forced_trace
    from backend.target.trace import TraceRunner

    local = models.target(request.target, request.device, request.dtype)
    outside = [t for t in tokens if not isinstance(t, int) or not 0 <= t < local.vocab_size]
    if outside:  # an engine's answer is input like any other
        raise BadInput(
            f"{source}: token ids outside the target's vocabulary ({local.vocab_size}): {outside[:3]}"
        )
    every = range(local.num_layers + 1)
    trace = forced_trace(local, list(request.prompt_ids), list(tokens), every, source)
    target = replace(local, runner=TraceRunner([trace], local.vocab_size, local.device))
    draft, report = models.draft(target, request.draft)
    along = replace(request, temperature=0.0, via="trace", trace_from="local", record=False)
    override = checked_override(along.target, along.aux_hf_indices)
    plan = resolve(along, target, draft, report, override)
    if tokens[-1] not in traces.stop_ids(plan, target):  # it ended at its budget (or a stop string)
        plan = resolve(replace(along, max_new_tokens=len(tokens)), target, draft, report, override)
    # else it ended at an end-of-generation id, which the replay stops at as the engine did: the budget
    # stays the request's, so the step that emitted it drafts as the engine's did (not as a last token)
    return run_plan(open_database(db_url), target, draft, plan)


def sampled_note(sampling: dict | None) -> str:
    """What a sampled check's headline adds ('' for a greedy one)."""
    if not sampling:
        return ""
    return (
        f" (sampled at temperature {sampling['temperature']:g}, seed {sampling['seed']} + prompt: each answer "
        "replayed along the tokens it emitted, the drafts greedy; the draws themselves are the engine's)"
    )


def rejected_yet_emitted(rows: list[PromptCheck]) -> str:
    """A sampled engine's step that counts fewer drafts than agree with the tokens it emitted, before its
    last step (every step before it equal): with greedy drafts, which the greedy check holds, the engine
    rejected a draft it then emitted, which a rejection sampler with no draft probabilities never does
    (forced_trace.py); else it drafted otherwise when sampling. '' where no prompt shows one."""
    seen = [
        r
        for r in rows
        if (d := r.first_difference) and d.served is not None and d.replay is not None
        and d.served < d.replay and d.step < min(r.served_steps, r.replay_steps) - 1
    ]  # fmt: skip
    if not seen:
        return ""
    served = sum(sum(r.served_per_step) for r in rows)
    replayed = sum(sum(r.replay_per_step) for r in rows)
    return (
        f"; on {len(seen)} of {len(rows)} prompts it accepted fewer drafts than agree with the tokens it emitted "
        f"(first: prompt {seen[0].prompt}, step {seen[0].first_difference.step}; {served} drafts accepted where its "
        f"own output matches {replayed}): it rejects drafts it then emits, or drafts otherwise when it samples; "
        "either way not a rejection sampler over greedy drafts, which its greedy answers are (check it without "
        "--temperature)"
    )
