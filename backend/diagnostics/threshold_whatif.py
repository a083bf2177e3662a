"""Where lost's what-if: stop drafting below a draft probability. From the stored steps of greedy
chains, what each threshold would have kept, accepted and wasted, and the speed-up the runs' own
timings predict for it (the Speed-up what-if's model, backend/diagnostics/whatif.py): the best
threshold is the one with the highest predicted speed-up."""

from __future__ import annotations

from backend.diagnostics.where_lost_result import LostRun, ThresholdRow

THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def thresholds(runs: list[LostRun], notes: list[str]) -> list[ThresholdRow]:
    """The what-if over the steps that kept a probability for every draft: as run, then each threshold."""
    drafted = [s for r in runs for s in r.steps if s.drafted_ids]
    steps = [s for s in drafted if len(s.draft_probs or []) >= len(s.drafted_ids)]
    if 0 < len(steps) < len(drafted):
        notes.append(
            f"threshold what-if over the {len(steps)} of {len(drafted)} steps that kept draft probabilities"
        )
    block = any(r.draft_method == "dflash" for r in runs)  # one forward drafts the whole block
    costs = _costs(steps, block)
    if steps and costs is None:
        notes.append(
            "no predicted speed-up: these steps kept no verify time (runs over a trace run no target "
            "forward, and older runs kept no timings)"
        )
    return [_threshold(None, steps, costs)] + [_threshold(t, steps, costs) for t in THRESHOLDS]


def _costs(steps, block: bool) -> tuple[float, float, bool] | None:
    """(mean verify ms per step, draft ms per drafted token, or per step for a `block` drafter, block)
    measured on the steps; None without a verify time. A DFlash block costs one forward however many
    of its drafts are kept: a threshold saves it no draft time."""
    verify = [getattr(s, "verify_ms", 0.0) or 0.0 for s in steps]
    if not steps or sum(verify) <= 0:
        return None
    drafted = len(steps) if block else sum(len(s.drafted_ids) for s in steps)
    draft_ms = sum(getattr(s, "draft_ms", 0.0) or 0.0 for s in steps)
    return sum(verify) / len(steps), draft_ms / drafted if drafted else 0.0, block


def _threshold(threshold: float | None, steps, costs) -> ThresholdRow:
    if not steps:
        return ThresholdRow(threshold, None, None, 0, 0)
    tokens = drafted = wasted = lost = 0
    for s in steps:
        k = len(s.drafted_ids)
        kept = k if threshold is None else _kept(s.draft_probs, k, threshold)
        accepted = min(s.accepted_count, kept)
        tokens += accepted + 1
        drafted += kept
        wasted += kept - accepted
        lost += s.accepted_count - accepted
    n = len(steps)
    speedup = None
    if costs is not None:  # AL x t_verify / (drafts x t_draft_per_token + t_verify); a block: t_draft a step
        verify, per_draft, block = costs
        speedup = (tokens / n) * verify / ((1 if block else drafted / n) * per_draft + verify)
    return ThresholdRow(threshold, tokens / n, drafted / n, wasted, lost, speedup)


def _kept(probabilities, k: int, threshold: float) -> int:
    """Drafts a step keeps under `threshold`: up to the first probability below it, at least one."""
    for j, p in enumerate(list(probabilities or [])[:k]):
        if p is not None and p < threshold:
            return max(1, j)
    return k


def best(rows: list[ThresholdRow]) -> ThresholdRow | None:
    """The row with the highest predicted speed-up (None when no row has one)."""
    scored = [r for r in rows if r.speedup is not None]
    return max(scored, key=lambda r: r.speedup) if scored else None
