"""The 95% interval of a mean over prompts (issue 42: accept length varies about +-50% between prompts,
so a mean is reported with its spread): Student's t, checked against hand-computed values."""

from __future__ import annotations

import statistics

import pytest

from backend.run.metrics import T975, mean_ci95


def test_the_interval_is_the_mean_plus_minus_t_times_the_standard_error():
    values = [1.0, 2.0, 3.0]  # mean 2, s = 1, n = 3: t(2) = 4.303, half-width 4.303 / sqrt(3)
    low, high = mean_ci95(values)
    assert low == pytest.approx(2 - 4.303 / 3**0.5) and high == pytest.approx(2 + 4.303 / 3**0.5)
    sixteen = [1.36, 2.02, 2.30, 1.97, 1.68, 2.21, 2.05, 1.69, 2.17, 1.79, 1.96, 2.16, 1.98, 2.24, 1.53, 2.21]
    low, high = mean_ci95(sixteen)  # MEASURED.md's final row: t(15) = 2.131
    half = 2.131 * statistics.stdev(sixteen) / 4
    assert (low, high) == pytest.approx((statistics.mean(sixteen) - half, statistics.mean(sixteen) + half))


def test_degenerate_and_large_samples():
    assert mean_ci95([]) is None and mean_ci95([2.0]) is None  # no spread from one value
    assert mean_ci95([2.0, 2.0, 2.0]) == [2.0, 2.0]
    assert T975[max(df for df in T975 if df <= 44)] == 2.021  # between entries: the next lower, wider
    low, high = mean_ci95([1.0, 3.0] * 200)  # n - 1 past the table: the normal 1.96
    assert high - 2.0 == pytest.approx(1.960 * statistics.stdev([1.0, 3.0] * 200) / 400**0.5)
