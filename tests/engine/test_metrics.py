"""Acceptance metrics on hand-computed step lists."""

from __future__ import annotations

import pytest

from backend.run.metrics import DEFINITIONS, acceptance_metrics, simulated_accept_length


def test_hand_computed_example():
    # K = 3; accepted counts per verify step
    metrics = acceptance_metrics([0, 3, 1, 2, 3, 0], 3)
    assert metrics.verify_steps == 6
    assert metrics.mean_accept_length == pytest.approx(1 + 9 / 6)  # 2.5, bonus included
    assert metrics.accepted_drafts_per_step == pytest.approx(1.5)
    assert metrics.acceptance_rate == pytest.approx(9 / 18)
    # P(a>=1) = 4/6, P(a>=2) = 3/6, P(a>=3) = 2/6
    assert metrics.per_position_marginal == pytest.approx([4 / 6, 3 / 6, 2 / 6])
    # conditional: 4/6, 3/4, 2/3
    assert metrics.per_position_conditional == pytest.approx([4 / 6, 3 / 4, 2 / 3])
    assert metrics.accept_histogram == (2, 1, 1, 2)


def test_all_rejected_and_empty():
    metrics = acceptance_metrics([0, 0, 0], 2)
    assert metrics.mean_accept_length == 1.0 and metrics.per_position_marginal == (0.0, 0.0)
    assert metrics.per_position_conditional == (0.0, None)  # nobody reached position 1
    empty = acceptance_metrics([], 4)
    assert empty.mean_accept_length is None and empty.accept_histogram == (0,) * 5


def test_out_of_range_counts_are_refused():
    with pytest.raises(ValueError):
        acceptance_metrics([0, 5], 4)


def test_simulated_accept_length_and_iid_reference():
    assert simulated_accept_length([0.8, 0.5, 0.5]) == pytest.approx(0.8 + 0.4 + 0.2)
    # i.i.d. alpha 0.8 -> AL = 1 + sum_k alpha^k = (1 - a^(K+1)) / (1 - a): 2.44 / 2.95 / 3.36 for K = 2 / 3 / 4
    for steps, expected in ((2, 2.44), (3, 2.952), (4, 3.3616)):
        assert 1 + simulated_accept_length([0.8] * steps) == pytest.approx(expected, abs=1e-3)


def test_every_metric_has_a_definition():
    fields = acceptance_metrics([1], 2).to_dict()
    for name in fields:
        if name not in (
            "num_steps",
            "verify_steps",
            "batch_size",
            "near_ties",
            "draft_ms_total",
            "verify_ms_total",
        ):
            assert name in DEFINITIONS
