"""Speed-up what-if: the measured K is reproduced, other K are predicted and extrapolated."""

from __future__ import annotations

import pytest

from backend.diagnostics.whatif import WhatIfRow, conditional_rates, predict


def test_whatif_reproduces_the_measured_k_and_extrapolates():
    counts = [2, 2, 0, 1]  # K = 2: alpha_1 = 3/4, alpha_2 = 2/3
    rows = {r.num_steps: r for r in predict(counts, 2, draft_ms_total=8.0, verify_ms_total=40.0)}
    assert rows[2].predicted_accept_length == pytest.approx(sum(a + 1 for a in counts) / len(counts))
    assert rows[1].predicted_accept_length == pytest.approx(1.75)
    assert rows[3].extrapolated and rows[3].predicted_accept_length == pytest.approx(2.25 + 0.5 * 2 / 3)
    # draft 1 ms per drafted token, verify 10 ms per step: speed-up(K=2) = 2.25 * 10 / (2 + 10)
    assert rows[2].predicted_speedup == pytest.approx(2.25 * 10 / 12)
    assert WhatIfRow.from_dict(rows[3].to_dict()) == rows[3] and set(rows[3].to_dict()) == {
        "num_steps", "predicted_accept_length", "predicted_speedup", "extrapolated"
    }  # fmt: skip


def test_rates_and_empty_runs():
    assert conditional_rates([2, 2, 0, 1], 2) == pytest.approx([3 / 4, 2 / 3])
    assert conditional_rates([0, 0], 2) == [0.0, None]
    assert predict([], 2, 1.0, 1.0) == []


def test_tree_whatif_reads_the_targets_token_among_the_drafts_top_k():
    from backend.diagnostics.whatif import predict_tree, topk_rates
    from backend.run.records import StepRecord

    def step(accepted, argmax, tops):
        drafted = [t[0] for t in tops]
        return StepRecord(0, 0, 0, drafted, accepted, argmax[accepted], [], argmax, draft_top_ids=tops)

    steps = [
        step(2, [5, 6, 7], [[5, 1], [6, 2]]),  # both accepted, top-1 each
        step(0, [9, 6, 7], [[5, 9], [6, 2]]),  # d1 rejected, the target's 9 is the draft's 2nd choice
        step(0, [8, 6, 7], [[5, 9], [6, 2]]),  # d1 rejected, 8 not in the draft's top-2
    ]
    assert topk_rates(steps, 1) == [1 / 3, 1.0]
    assert topk_rates(steps, 2) == [2 / 3, 1.0]
    guess = predict_tree(steps, 3, 2, 7)
    assert guess.alphas == [2 / 3, 1.0, 1.0] and guess.extrapolated and not guess.budget_limited
    assert abs(guess.predicted_accept_length - (1 + 2 / 3 + 2 / 3 + 2 / 3)) < 1e-9
    assert predict_tree([step(0, [1], [])], 2, 2, 5) is None  # nothing recorded
