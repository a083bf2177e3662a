"""Plotly figures for runs and diagnostics (data in, figure out)."""

from __future__ import annotations

import re

import plotly.graph_objects as go

# Legends above the plot area, right-aligned: below it they sit on the x-axis tick labels.
# Below the plot: above it, a legend collides with the title in a half-width column;
# plotly widens the bottom margin to fit it.
# Its top sits below the x-axis title (at -0.18 the title was drawn over the legend).
LEGEND_BELOW = dict(orientation="h", yanchor="top", y=-0.3, xanchor="left", x=0)


def acceptance_bars(series: dict[str, list[float]], title: str) -> go.Figure:
    figure = go.Figure()
    for name, values in series.items():
        figure.add_bar(x=[f"d{i + 1}" for i in range(len(values))], y=values, name=name)
    figure.update_layout(
        title=title,
        xaxis_title="draft position i (d1 = the first drafted token)",
        yaxis_title="rate over verify steps",
        yaxis_range=[0, 1],
        barmode="group",
        height=300,
        margin=dict(l=10, r=10, t=40, b=10),
        legend=LEGEND_BELOW,
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
    """Wall-clock time of each verify step's draft and verify, steps numbered from 1 as on screen."""
    steps = list(range(1, len(draft_ms) + 1))
    figure = go.Figure()
    figure.add_bar(x=steps, y=draft_ms, name="draft")
    figure.add_bar(x=steps, y=verify_ms, name="verify")
    figure.update_layout(
        title="Time per verify step (wall clock, this machine)",
        barmode="stack",
        xaxis_title="verify step (1 = first)",
        yaxis_title="ms",
        height=300,
        margin=dict(l=10, r=10, t=40, b=10),
        legend=LEGEND_BELOW,
    )
    return figure


def served_steps(
    served: list[int], replayed: list[int], first_difference: int | None, engine: str = "vLLM"
) -> go.Figure:
    """Accepted drafts per verify step, the engine's beside the replay's; the first difference marked."""
    figure = go.Figure()
    figure.add_bar(x=list(range(1, len(served) + 1)), y=served, name=f"{engine} accepted")
    figure.add_bar(x=list(range(1, len(replayed) + 1)), y=replayed, name="replay accepted")
    if first_difference is not None:
        figure.add_vline(x=first_difference + 1, line_dash="dash", annotation_text="first difference")
    figure.update_layout(
        title=f"Accepted drafts per step, {engine} vs replay",
        barmode="group",
        xaxis_title="verify step (1 = first)",
        yaxis_title="accepted drafts a",
        height=300,
        margin=dict(l=10, r=10, t=40, b=10),
        legend=LEGEND_BELOW,
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


def scale_note(value: str, auto_range: bool) -> str:
    scale = FIXED_SCALES.get(value)
    if auto_range or not scale:
        return "(data range)"
    return (
        f"(fixed {scale['zmin']:g}..{scale['zmax']:g})"
        if "zmax" in scale
        else f"(fixed from {scale['zmin']:g})"
    )


ROLES = ("low", "mid", "high")


def chunk_sort_key(chunk: str):
    """Stored chunk names in reading order: hf2 < hf16 < hf29 (numeric, not alphabetical)."""
    found = re.fullmatch(r"hf(\d+)", chunk)
    return (0, int(found.group(1)), "") if found else (1, 0, chunk)


def chunk_labels(chunks) -> dict[str, str]:
    """Readable names for stored chunk names: 'hf4' (the draft's fed hidden_states[4]) reads
    'mid · hidden_states[4]' when three aux chunks are fed (EAGLE-3's low, mid, high)."""
    ordered = sorted(set(chunks), key=chunk_sort_key)
    aux = [c for c in ordered if re.fullmatch(r"hf\d+", c)]
    labels = {c: c for c in ordered}
    for i, chunk in enumerate(aux):
        role = f"{ROLES[i]} · " if len(aux) == len(ROLES) else ""
        labels[chunk] = f"{role}hidden_states[{chunk[2:]}]"
    return labels


# A long run's heatmap keeps every position but bins them into at most MAX_COLUMNS columns, so a
# step-viewer click re-sends a small figure; each bin shows its worst value for the value's meaning.
MAX_COLUMNS = 400
BIN_AGGREGATE = {
    "cosine": min,
    "norm": lambda v: sum(v) / len(v),
    "norm_ratio": lambda v: max(v, key=lambda x: abs(x - 1)),
}
BIN_WORDS = {"cosine": "lowest", "norm": "mean", "norm_ratio": "farthest from 1"}


def heatmap(
    rows: list,
    value: str,
    title: str,
    chunk_order: list[str] | None = None,
    mark: tuple[int, int] | None = None,
    auto_range: bool = False,
) -> go.Figure:
    """Positions x chunks of `rows` (mismatch.ChunkRow), coloured by their field `value`; `mark` outlines
    the positions [first, last] of the current step. The colour scale is fixed by meaning (FIXED_SCALES,
    named in the colour bar) unless `auto_range` asks for the data's own range."""
    chunks = chunk_order or sorted({r.chunk for r in rows}, key=chunk_sort_key)
    labels = chunk_labels(chunks)
    positions = sorted({r.position for r in rows})
    width = -(-len(positions) // MAX_COLUMNS)  # positions per column: 1 up to MAX_COLUMNS positions
    starts = positions[::width]
    column = {p: i // width for i, p in enumerate(positions)}
    cells: list[list[list[float]]] = [[[] for _ in starts] for _ in chunks]
    for r in rows:
        if r.chunk in chunks and getattr(r, value) is not None:
            cells[chunks.index(r.chunk)][column[r.position]].append(getattr(r, value))
    pick = BIN_AGGREGATE.get(value, max)
    grid = [[pick(cell) if cell else None for cell in row] for row in cells]
    if width > 1:
        title = f"{title} · {width} positions per column ({BIN_WORDS.get(value, 'max')})"
    figure = go.Figure(
        go.Heatmap(
            z=grid,
            x=[start + (width - 1) / 2 for start in starts],  # each column centred on its positions
            y=[labels[c] for c in chunks],
            colorscale="RdBu" if value == "cosine" else "Viridis",
            colorbar=dict(title=f"{value}<br>{scale_note(value, auto_range)}"),
            **({} if auto_range else FIXED_SCALES.get(value, {})),
        )
    )
    figure.update_layout(title=title, xaxis_title="position", height=260, margin=dict(l=10, r=10, t=40, b=10))
    if mark is not None:
        figure.add_vrect(
            x0=mark[0] - 0.5, x1=mark[1] + 0.5, line=dict(color="#ff9800", width=2), fillcolor="rgba(0,0,0,0)"
        )
    return figure


def whatif(rows: list, measured: dict | None = None) -> go.Figure:
    """`rows`: the what-if's WhatIfRow per K (backend/diagnostics/whatif.py); `measured`: K -> the
    accept length a replay measured."""
    ks = [r.num_steps for r in rows]
    figure = go.Figure()
    figure.add_scatter(
        x=ks,
        y=[r.predicted_accept_length for r in rows],
        name="predicted accept length",
        mode="lines+markers",
    )
    figure.add_scatter(
        x=ks,
        y=[r.predicted_speedup for r in rows],
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
        legend=LEGEND_BELOW,
    )
    return figure


def predicted_vs_live(rows: list, flag_ratio: float) -> go.Figure:
    """Per sample (agreement.AgreementRow): teacher-forced predicted accept length (x) against the live
    one (y), with the line where they agree and the flag line live = flag_ratio x predicted."""
    points = [r for r in rows if r.predicted_accept_length is not None and r.live_accept_length is not None]
    top = max([1.0] + [max(r.predicted_accept_length, r.live_accept_length) for r in points]) * 1.05
    figure = go.Figure()
    figure.add_scatter(
        x=[r.predicted_accept_length for r in points],
        y=[r.live_accept_length for r in points],
        mode="markers",
        marker=dict(size=10, color=["#c62828" if r.flagged else "#1565c0" for r in points]),
        text=[f"sample {r.sample}" for r in points],
        name="samples (red: flagged)",
    )
    figure.add_scatter(
        x=[1, top], y=[1, top], mode="lines", line=dict(dash="dot", color="#607d8b"), name="live = predicted"
    )
    figure.add_scatter(
        x=[1, top],
        y=[flag_ratio, flag_ratio * top],
        mode="lines",
        line=dict(dash="dash", color="#c62828"),
        name=f"flag: live = {flag_ratio} x predicted",
    )
    figure.update_layout(
        title="Predicted (teacher-forced) vs live accept length",
        xaxis_title="predicted accept length",
        yaxis_title="live accept length",
        xaxis_range=[1, top],
        yaxis_range=[0, top],
        height=340,
        margin=dict(l=10, r=10, t=60, b=10),
        legend=LEGEND_BELOW,
    )
    return figure
