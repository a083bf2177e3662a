"""Speed-up what-if: predict accept length and speed-up for other chain lengths K from one run,
and the accept length of a tree (steps, topk, draft tokens) from a recorded greedy run.

Model (docs/reference.md §6): with per-position conditional acceptance alpha_i
(P(a >= i | a >= i-1)), a chain of K drafts gives AL(K) = 1 + sum_{k<=K} prod_{i<=k} alpha_i
(bonus included). Positions beyond the measured K reuse the last measured alpha (marked
extrapolated). Cost: the draft's time per step grows linearly in K (measured draft ms per drafted
token), the verify forward costs what it cost at the measured K, and a plain decoding step is
assumed to cost one verify forward (memory-bound serving; on a CPU the verify of K+1 tokens costs
more, which this model does not see). Speed-up = AL(K) * t_verify / (t_draft(K) + t_verify).
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.plain import Plain
from backend.run.metrics import accept_histogram, position_rates, simulated_accept_length

MODEL = (
    "AL(K) = 1 + sum_k prod_{i<=k} alpha_i (alpha_i: measured conditional acceptance); "
    "speed-up = AL(K) * t_verify / (K * t_draft_per_token + t_verify)"
)


@dataclass(frozen=True)
class WhatIfRow(Plain):
    num_steps: int
    predicted_accept_length: float
    predicted_speedup: float
    extrapolated: bool


def conditional_rates(accepted_counts: list[int], num_steps: int) -> list[float | None]:
    """P(a >= i | a >= i-1), i = 1..K, of the measured steps (metrics.position_rates)."""
    return position_rates(accept_histogram(accepted_counts, num_steps), num_steps)[1]


def predict(
    accepted_counts: list[int],
    num_steps: int,
    draft_ms_total: float,
    verify_ms_total: float,
    candidates=range(1, 9),
) -> list[WhatIfRow]:
    if not accepted_counts:
        return []
    measured = [r for r in conditional_rates(accepted_counts, num_steps) if r is not None]
    fallback = measured[-1] if measured else 0.0
    steps = len(accepted_counts)
    draft_per_token = draft_ms_total / (steps * num_steps)
    verify = verify_ms_total / steps
    rows = []
    for k in candidates:
        alphas = [measured[i] if i < len(measured) else fallback for i in range(k)]
        total = 1.0 + simulated_accept_length(alphas)  # the bonus token plus sum_k prod_{i<=k} alpha_i
        speedup = total * verify / (k * draft_per_token + verify) if verify > 0 else 0.0
        rows.append(WhatIfRow(k, total, speedup, k > len(measured)))
    return rows


TREE_MODEL = (
    "AL(S, k) = 1 + sum_{i<=S} prod_{j<=i} alpha_j(k), alpha_j(k) = P(the target's token at depth j is among "
    "the draft's top-k there | depth j-1 reached): measured on the run's accepted path (its recorded top "
    "alternatives), reused past the measured depth. An estimate, not a bound: it assumes the accepted path "
    "keeps its k best children at every depth (SGLang's N-1 best-scored nodes may not when N - 1 < k x S), "
    "and it reads the chain run's steps, whose positions differ from the tree's"
)


@dataclass(frozen=True)
class TreeWhatIf(Plain):
    num_steps: int
    topk: int
    num_draft_tokens: int
    predicted_accept_length: float
    alphas: list[float]
    budget_limited: bool  # N - 1 < k * S: the budget may cut the accepted path's siblings
    extrapolated: bool  # depths or k beyond what the run recorded


def topk_rates(steps, topk: int) -> list[float | None]:
    """alpha_j(k) per depth j = 1..K of a recorded greedy chain run: among steps that reached depth
    j - 1, the share whose target token at depth j (the accepted draft, or the bonus where the chain
    stopped) is among the draft's top-k alternatives at depth j."""
    depth = max((len(s.drafted_ids) for s in steps), default=0)
    rates = []
    for j in range(1, depth + 1):
        reached = hits = 0
        for step in steps:
            if step.accepted_count < j - 1 or len(step.draft_top_ids) < j:
                continue
            reached += 1
            wanted = step.target_argmax_ids[j - 1]
            hits += wanted in step.draft_top_ids[j - 1][:topk]
        rates.append(hits / reached if reached else None)
    return rates


def predict_tree(steps, num_steps: int, topk: int, num_draft_tokens: int) -> TreeWhatIf | None:
    """The tree what-if (TREE_MODEL). None when the run recorded no alternatives."""
    recorded = [s for s in steps if s.draft_top_ids]
    if not recorded:
        return None
    width = min(len(ids) for s in recorded for ids in s.draft_top_ids)
    measured = [r for r in topk_rates(recorded, min(topk, width)) if r is not None]
    if not measured:
        return None
    alphas = [measured[i] if i < len(measured) else measured[-1] for i in range(num_steps)]
    return TreeWhatIf(
        num_steps,
        topk,
        num_draft_tokens,
        1.0 + simulated_accept_length(alphas),
        alphas,
        num_draft_tokens - 1 < topk * num_steps,
        num_steps > len(measured) or topk > width,
    )
