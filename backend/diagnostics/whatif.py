"""Speed-up what-if: predict accept length and speed-up for other chain lengths K from one run.

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

MODEL = (
    "AL(K) = 1 + sum_k prod_{i<=k} alpha_i (alpha_i: measured conditional acceptance); "
    "speed-up = AL(K) * t_verify / (K * t_draft_per_token + t_verify)"
)


@dataclass
class WhatIfRow:
    num_steps: int
    predicted_accept_length: float
    predicted_speedup: float
    extrapolated: bool

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def conditional_rates(accepted_counts: list[int], num_steps: int) -> list[float | None]:
    rates = []
    for i in range(1, num_steps + 1):
        reached = sum(1 for a in accepted_counts if a >= i - 1)
        rates.append(sum(1 for a in accepted_counts if a >= i) / reached if reached else None)
    return rates


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
        total, running = 1.0, 1.0
        for alpha in alphas:
            running *= alpha
            total += running
        speedup = total * verify / (k * draft_per_token + verify) if verify > 0 else 0.0
        rows.append(WhatIfRow(k, total, speedup, k > len(measured)))
    return rows
