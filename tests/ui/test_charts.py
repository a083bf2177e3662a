"""Plotly figures: data in, figure out."""

from __future__ import annotations

from backend.diagnostics.mismatch import ChunkRow
from ui import charts


def test_figures_carry_their_data():
    bars = charts.acceptance_bars({"marginal": [0.8, 0.5], "conditional": [0.8, 0.6]}, "acceptance")
    assert [t.name for t in bars.data] == ["marginal", "conditional"] and list(bars.data[0].x) == ["d1", "d2"]
    assert list(charts.histogram([2, 1, 3], "h").data[0].y) == [2, 1, 3]
    assert len(charts.step_times([1.0, 2.0], [3.0, 4.0]).data) == 2
    rows = [ChunkRow(0, "hf0", cosine=1.0), ChunkRow(1, "hf2", cosine=0.5)]
    heat = charts.heatmap(rows, "cosine", "cos", ["hf0", "hf2"])
    assert [list(r) for r in heat.data[0].z] == [[1.0, None], [None, 0.5]]
    from backend.diagnostics.whatif import WhatIfRow

    whatif = charts.whatif([WhatIfRow(1, 1.5, 1.2, False)], {1: 1.6})
    assert len(whatif.data) == 3


def test_cosine_and_difference_scales_do_not_rescale_to_the_data():
    """Identical features (cosine 1 everywhere, difference 0) must not paint stripes on a
    0.9999998..1.0000002 scale, and cosines near 0 must not look vivid."""
    same = [ChunkRow(p, "hf0", cosine=1.0 - 1e-7 * (p % 2), max_abs_diff=0.0) for p in range(4)]
    cosine = charts.heatmap(same, "cosine", "cos").data[0]
    assert (cosine.zmin, cosine.zmax, cosine.zmid) == (-1.0, 1.0, 0.0)
    assert charts.heatmap(same, "max_abs_diff", "diff").data[0].zmin == 0.0
    assert charts.heatmap(same, "norm", "norm").data[0].zmin is None  # norms keep the data's range


def test_chunks_read_in_layer_order_with_their_role_and_the_current_step_is_outlined():
    rows = [ChunkRow(p, c, norm=1.0) for p in range(3) for c in ("hf29", "hf2", "hf16")]
    heat = charts.heatmap(rows, "norm", "norm", mark=(1, 2))
    assert list(heat.data[0].y) == [
        "low · hidden_states[2]",
        "mid · hidden_states[16]",
        "high · hidden_states[29]",
    ]
    (box,) = heat.layout.shapes
    assert (box.x0, box.x1) == (0.5, 2.5)
    assert charts.chunk_labels(["hf0", "hf3"]) == {"hf0": "hidden_states[0]", "hf3": "hidden_states[3]"}
    assert charts.chunk_labels(["draft_out"]) == {"draft_out": "draft_out"}


def test_auto_range_is_a_choice_and_the_scale_is_named():
    rows = [ChunkRow(0, "hf0", cosine=0.01), ChunkRow(1, "hf0", cosine=0.02)]
    fixed = charts.heatmap(rows, "cosine", "cos").data[0]
    auto = charts.heatmap(rows, "cosine", "cos", auto_range=True).data[0]
    assert (
        "fixed -1..1" in fixed.colorbar.title.text
        and auto.zmin is None
        and "data range" in auto.colorbar.title.text
    )


def test_a_long_run_is_binned_not_cut_and_each_bin_shows_its_worst():
    rows = [ChunkRow(p, "hf2", cosine=0.1 if p == 1234 else 1.0) for p in range(2000)]
    heat = charts.heatmap(rows, "cosine", "cos", mark=(1230, 1234))
    (trace,) = heat.data
    assert len(trace.x) == charts.MAX_COLUMNS and trace.x[0] == 2.0 and trace.x[-1] == 1997.0  # 5 per column
    assert min(trace.z[0]) == 0.1 and trace.z[0][1234 // 5] == 0.1  # the bad position is not averaged away
    assert "5 positions per column (lowest)" in heat.layout.title.text
    short = charts.heatmap(rows[:300], "cosine", "cos")
    assert list(short.data[0].x) == list(range(300))
