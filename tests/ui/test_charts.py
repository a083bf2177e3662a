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


def test_cosine_and_difference_scales_do_not_rescale_to_the_data():
    """Identical features (cosine 1 everywhere, difference 0) must not paint stripes on a
    0.9999998..1.0000002 scale, and cosines near 0 must not look vivid."""
    same = [
        {"position": p, "chunk": "hf0", "cosine": 1.0 - 1e-7 * (p % 2), "max_abs_diff": 0.0} for p in range(4)
    ]
    cosine = charts.heatmap(same, "cosine", "cos").data[0]
    assert (cosine.zmin, cosine.zmax, cosine.zmid) == (-1.0, 1.0, 0.0)
    assert charts.heatmap(same, "max_abs_diff", "diff").data[0].zmin == 0.0
    assert charts.heatmap(same, "norm", "norm").data[0].zmin is None  # norms keep the data's range
