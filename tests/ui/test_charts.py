"""Plotly figures: data in, figure out."""

from __future__ import annotations

from ui import charts


def test_figures_carry_their_data():
    bars = charts.acceptance_bars({"marginal": [0.8, 0.5], "conditional": [0.8, 0.6]}, "acceptance")
    assert [t.name for t in bars.data] == ["marginal", "conditional"] and list(bars.data[0].x) == ["d1", "d2"]
    assert list(charts.histogram([2, 1, 3], "h").data[0].y) == [2, 1, 3]
    assert len(charts.step_times([1.0, 2.0], [3.0, 4.0]).data) == 2
    rows = [{"position": 0, "chunk": "hf0", "cosine": 1.0}, {"position": 1, "chunk": "hf2", "cosine": 0.5}]
    heat = charts.heatmap(rows, "cosine", "cos", ["hf0", "hf2"])
    assert [list(r) for r in heat.data[0].z] == [[1.0, None], [None, 0.5]]
    whatif = charts.whatif(
        [{"num_steps": 1, "predicted_accept_length": 1.5, "predicted_speedup": 1.2}], {1: 1.6}
    )
    assert len(whatif.data) == 3
