"""What the served sampling penalties cost the draft, measured: live replays of the samples' prompts
without the penalty, with it on the target only (what vLLM and SGLang serve, vllm#48932,
sglang#33643) and with it on both (a draft that mirrors it). Class sampling-penalties."""

from __future__ import annotations

from backend.diagnostics.findings import Finding
from backend.engine.penalties import Penalties
from backend.engine.replay import ReplayConfig, replay
from backend.run.metrics import acceptance_metrics
from backend.run.records import PrefillRecord

COSTLY = 0.1  # accept length lost to the penalty above this: a warning

FIELDS = {
    "repetition_penalty": "repetition",
    "frequency_penalty": "frequency",
    "presence_penalty": "presence",
}


def penalties_from(served: dict, on_draft: bool = False) -> Penalties:
    """Penalties from request-style field names (ValueError when a value is out of range)."""
    return Penalties(**{FIELDS[k]: float(v) for k, v in served.items() if k in FIELDS}, on_draft=on_draft)


def _accept_length(
    target, draft, wiring, math, prompts, num_steps, max_new_tokens, penalties
) -> float | None:
    counts = []
    config = ReplayConfig(num_steps, max_new_tokens, record=False, math=math, penalties=penalties)
    for prompt in prompts:
        counts += [
            r.accepted_count
            for r in replay(target, draft, prompt, wiring, config)
            if not isinstance(r, PrefillRecord)
        ]
    return acceptance_metrics(counts, num_steps).mean_accept_length if counts else None


def penalty_findings(
    target, draft, wiring, math, samples: list, num_steps: int, max_new_tokens: int, served: dict
) -> tuple[list[Finding], str]:
    """(findings, what ran) for the served penalties on the samples' prompts."""
    if not served:
        return [], "skipped: no penalty served"
    if not samples:
        return [], "skipped: no live samples (--live 0)"
    try:
        on_target, on_both = penalties_from(served), penalties_from(served, on_draft=True)
    except ValueError as error:
        return [], f"skipped: {error}"
    prompts = [list(s.input_ids[: s.prompt_len]) for s in samples]
    run = lambda p: _accept_length(target, draft, wiring, math, prompts, num_steps, max_new_tokens, p)  # noqa: E731
    plain, served_al, mirrored = run(Penalties()), run(on_target), run(on_both)
    if None in (plain, served_al, mirrored):
        return [], "skipped: no verify step in the replays"
    lost = plain - served_al
    evidence = {
        "penalties": served,
        "accept_length_without_penalty": plain,
        "accept_length_penalty_on_target": served_al,
        "accept_length_penalty_on_both": mirrored,
        "prompts": len(prompts),
        "max_new_tokens": max_new_tokens,
        "definition": "greedy live replays at K, mean of a + 1 over verify steps; the penalty applied when the "
        "target verifies (and, for on_both, to the draft's proposals)",
    }
    label = on_target.label.replace(" on the target only", "")
    finding = Finding(
        "sampling-penalties",
        "warn" if lost > COSTLY else "info",
        f"with {label} on the target only, as the engines serve it, the draft accepts {served_al:.2f} per verify step "
        f"against {plain:.2f} without the penalty; a draft that mirrored it would accept {mirrored:.2f} "
        f"({len(prompts)} prompts, greedy, K = {num_steps})",
        evidence,
        "Serve speculative requests without the penalty, or on an engine release that applies it to the draft "
        "(vLLM's draft_apply_repetition_penalty, vllm#48932); report accept length with and without it."
        if lost > COSTLY
        else "",
    )
    return [finding], f"ran on {len(prompts)} samples"
