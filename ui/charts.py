"""Plotly figures for runs and diagnostics (data in, figure out)."""

from __future__ import annotations

import plotly.graph_objects as go


def acceptance_bars(series: dict[str, list[float]], title: str) -> go.Figure:
    figure = go.Figure()
    for name, values in series.items():
        figure.add_bar(x=[f"d{i + 1}" for i in range(len(values))], y=values, name=name)
    figure.update_layout(
        title=title,
        yaxis_range=[0, 1],
        barmode="group",
        height=300,
        margin=dict(l=10, r=10, t=40, b=10),
        legend=dict(orientation="h"),
    )
    return figure


def histogram(counts: list[int], title: str) -> go.Figure:
    figure = go.Figure(go.Bar(x=[str(a) for a in range(len(counts))], y=counts))
    figure.update_layout(
        title=title,
        xaxis_title="accepted drafts a",
        yaxis_title="verify steps",
        height=300,
        margin=dict(l=10, r=10, t=40, b=10),
    )
    return figure


def step_times(draft_ms: list[float], verify_ms: list[float]) -> go.Figure:
    steps = list(range(len(draft_ms)))
    figure = go.Figure()
    figure.add_bar(x=steps, y=draft_ms, name="draft ms")
    figure.add_bar(x=steps, y=verify_ms, name="verify ms")
    figure.update_layout(
        title="Time per verify step",
        barmode="stack",
        xaxis_title="step",
        height=300,
        margin=dict(l=10, r=10, t=40, b=10),
        legend=dict(orientation="h"),
    )
    return figure


# Colour scales that do not rescale to the data: identical features (cosine 1.0000000 everywhere)
# must not show stripes, and cosines near 0 must not look vivid. Cosine spans its whole range with
# white at 0; differences and errors start at 0.
FIXED_SCALES = {
    "cosine": {"zmin": -1.0, "zmax": 1.0, "zmid": 0.0},
    "max_abs_diff": {"zmin": 0.0},
    "relative_error": {"zmin": 0.0},
    "norm_ratio": {"zmin": 0.0},
}


def heatmap(rows: list[dict], value: str, title: str, chunk_order: list[str] | None = None) -> go.Figure:
    chunks = chunk_order or sorted({r["chunk"] for r in rows})
    positions = sorted({r["position"] for r in rows})
    column = {p: i for i, p in enumerate(positions)}
    grid = [[None] * len(positions) for _ in chunks]
    for r in rows:
        if r["chunk"] in chunks and r.get(value) is not None:
            grid[chunks.index(r["chunk"])][column[r["position"]]] = r[value]
    figure = go.Figure(
        go.Heatmap(
            z=grid,
            x=positions,
            y=chunks,
            colorscale="RdBu" if value == "cosine" else "Viridis",
            colorbar=dict(title=value),
            **FIXED_SCALES.get(value, {}),
        )
    )
    figure.update_layout(title=title, xaxis_title="position", height=260, margin=dict(l=10, r=10, t=40, b=10))
    return figure


def whatif(rows: list[dict], measured: dict | None = None) -> go.Figure:
    ks = [r["num_steps"] for r in rows]
    figure = go.Figure()
    figure.add_scatter(
        x=ks,
        y=[r["predicted_accept_length"] for r in rows],
        name="predicted accept length",
        mode="lines+markers",
    )
    figure.add_scatter(
        x=ks,
        y=[r["predicted_speedup"] for r in rows],
        name="predicted speed-up",
        mode="lines+markers",
        yaxis="y2",
    )
    if measured:
        figure.add_scatter(
            x=list(measured),
            y=list(measured.values()),
            name="measured accept length",
            mode="markers",
            marker=dict(size=12, symbol="x"),
        )
    figure.update_layout(
        title="What if K were different",
        xaxis_title="K (chain drafts per step)",
        yaxis_title="accept length",
        yaxis2=dict(title="speed-up", overlaying="y", side="right"),
        height=320,
        margin=dict(l=10, r=10, t=40, b=10),
        legend=dict(orientation="h"),
    )
    return figure
