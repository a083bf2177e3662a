"""When a compared chunk counts as a mismatch, and the per-chunk summary (plain Python)."""

from __future__ import annotations

import pytest

from backend.diagnostics.mismatch import chunk_summary, first_mismatch, is_mismatch


def row(position, chunk, cosine=1.0, relative_error=0.0, norm_ratio=1.0):
    return {
        "position": position,
        "chunk": chunk,
        "cosine": cosine,
        "relative_error": relative_error,
        "norm_ratio": norm_ratio,
    }


def test_thresholds():
    assert not is_mismatch(row(0, "a", cosine=0.9995, relative_error=0.04))
    assert is_mismatch(row(0, "a", cosine=0.998))
    assert is_mismatch(row(0, "a", relative_error=0.06))


def test_first_mismatch_is_the_earliest_position_then_the_lowest_chunk():
    rows = [row(3, "a", cosine=0.5), row(2, "c", cosine=0.5), row(2, "b", relative_error=1.0), row(1, "a")]
    assert first_mismatch(rows, ["a", "b", "c"]) == rows[2]
    assert first_mismatch([row(0, "a")], ["a"]) is None


def test_chunk_summary():
    rows = [row(0, "a"), row(1, "a", cosine=0.5, norm_ratio=3.0, relative_error=0.2), row(0, "b")]
    a, b = chunk_summary(rows, ["a", "b", "c"])
    assert (a["chunk"], a["positions"], a["mismatching"], a["min_cosine"]) == ("a", 2, 1, 0.5)
    assert a["mean_norm_ratio"] == pytest.approx(2.0) and a["max_relative_error"] == pytest.approx(0.2)
    assert (b["chunk"], b["positions"], b["mismatching"]) == ("b", 1, 0)
