"""The Where-lost page's charts and tables (backend/diagnostics/where_lost.py computes them): one
figure per split, the drafts side by side, every bar clickable to list the steps it counts."""

from __future__ import annotations

import html
from itertools import cycle

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from backend.run.run_value import id_ranges
from backend.service import where_lost as lost
from backend.service.where_lost import DEFINITIONS, MIN_ATTEMPTS, WhereLost
from ui import state
from ui.charts import LEGEND_BELOW
from ui.numbers import plural

COLOURS = ("#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a")
TOO_FEW = "#bdbdbd"


@st.cache_data(show_spinner="Reading the runs' steps...", max_entries=8)
def where_lost(db_url: str, run_ids: tuple[int, ...]) -> WhereLost:
    """The losses of these finished runs (they do not change once finished; a deleted run changes the
    ids asked), read once per set: a click on a bar reruns the page without reading the steps again."""
    return lost.where_lost_over(db_url, list(run_ids))


def _layout(figure: go.Figure, title: str, xaxis: str, yaxis: str, height: int = 320) -> go.Figure:
    figure.update_layout(
        title=title,
        xaxis_title=xaxis,
        yaxis_title=yaxis,
        yaxis_range=[0, 1.05],
        barmode="group",
        height=height,
        margin=dict(l=10, r=10, t=40, b=10),
        legend=LEGEND_BELOW,
        clickmode="event+select",
    )
    return figure


def position_figure(found: WhereLost) -> go.Figure:
    figure = go.Figure()
    for colour, d in zip(cycle(COLOURS), found.drafts):
        rows = d.by_position
        low = [
            m - c[0] if m is not None and c else 0
            for m, c in ((r.marginal_mean, r.marginal_ci95) for r in rows)
        ]
        high = [
            c[1] - m if m is not None and c else 0
            for m, c in ((r.marginal_mean, r.marginal_ci95) for r in rows)
        ]
        figure.add_bar(
            x=[f"d{r.position}" for r in rows],
            y=[r.marginal_mean for r in rows],
            name=f"{_shown(d.name)} ({plural(d.runs, 'sample')})",
            marker_color=colour,
            error_y=dict(type="data", symmetric=False, array=high, arrayminus=low),
            customdata=[[r.steps, r.conditional, r.marginal] for r in rows],
            hovertemplate="%{x}: P(a >= i) %{y:.3f} (mean over samples)<br>pooled %{customdata[2]:.3f}, "
            "P(a >= i | a >= i-1) %{customdata[1]:.3f}<br>%{customdata[0]} verify steps<extra>%{fullData.name}</extra>",
        )
    return _layout(
        figure, "By draft position: P(a >= i), 95% CI over samples", "draft position i", "P(a >= i)"
    )


def group_figure(found: WhereLost, split: str, title: str, xaxis: str) -> go.Figure:
    """One bar per group and draft: its acceptance with the Wilson interval; a group too small to
    judge is a grey bar of height 0 labelled so, never a rate."""
    figure = go.Figure()
    order = list(dict.fromkeys(g.group for d in found.drafts for g in getattr(d, split)))  # names as stored
    for colour, d in zip(cycle(COLOURS), found.drafts):
        groups = {g.group: g for g in getattr(d, split)}
        shown = [groups.get(name) for name in order]
        figure.add_bar(
            x=[_shown(name) for name in order],
            y=[g.rate if g is not None and g.rate is not None else 0 for g in shown],
            name=_shown(d.name),
            marker_color=[colour if g is not None and g.rate is not None else TOO_FEW for g in shown],
            text=[_label(g) for g in shown],
            textposition="outside",
            error_y=dict(
                type="data",
                symmetric=False,
                array=[g.ci95[1] - g.rate if g is not None and g.ci95 else 0 for g in shown],
                arrayminus=[g.rate - g.ci95[0] if g is not None and g.ci95 else 0 for g in shown],
            ),
            customdata=[[g.attempts if g else 0, g.share if g else 0, g.samples if g else 0] for g in shown],
            hovertemplate="%{x}: acceptance %{y:.3f}<br>%{customdata[0]} attempts (%{customdata[1]:.1%} of all), "
            "%{customdata[2]} samples<extra>%{fullData.name}</extra>",
        )
    return _layout(figure, title, xaxis, "accepted / attempts")


def _label(group) -> str:
    """A bar's text: only where there is no rate to draw (an "n=" over every bar sat on its error bar;
    the attempts are in the hover and the table)."""
    if group is None:
        return "none"
    return "" if group.rate is not None else "too few"


def calibration_figure(found: WhereLost) -> go.Figure:
    figure = go.Figure()
    figure.add_scatter(
        x=[0, 1], y=[0, 1], mode="lines", name="calibrated", line=dict(dash="dot", color="#9e9e9e")
    )
    for colour, d in zip(cycle(COLOURS), found.drafts):
        overall = d.calibration[0]
        bins = [b for b in overall.bins if b.attempts]
        ece = "n/a" if overall.ece is None else f"{overall.ece:.3f}"
        figure.add_scatter(
            x=[b.mean_probability for b in bins],
            y=[b.acceptance for b in bins],
            mode="lines+markers",
            name=f"{_shown(d.name)} (ECE {ece})",
            marker=dict(color=colour, size=[6 + min(14, b.attempts // 10) for b in bins]),
            customdata=[[b.attempts, b.low, b.high] for b in bins],
            hovertemplate="draft p in [%{customdata[1]:.1f}, %{customdata[2]:.1f}): mean %{x:.3f}, accepted "
            "%{y:.3f}<br>%{customdata[0]} attempts<extra>%{fullData.name}</extra>",
        )
    figure = _layout(
        figure,
        "Calibration: the draft's probability vs acceptance",
        "draft's probability of its proposal",
        "acceptance",
    )
    figure.update_layout(xaxis_range=[0, 1.02], clickmode="event")
    return figure


def _shown(name: str) -> str:
    """A name from the data (a draft's folder, a dataset's source) as plotly may draw it: plotly reads
    `<br>`, `<b>`, `<a href>` in labels and hovers, so its markup characters are escaped."""
    return html.escape(name, quote=True)


def clicked(event) -> tuple[int, str] | None:
    """(trace index, x) of the bar a user clicked in a chart drawn with on_select, else None."""
    points = list(getattr(getattr(event, "selection", None), "points", None) or [])
    if not points:
        return None
    point = points[0]
    return point.get("curve_number", 0), str(point.get("x"))


def show_steps(found: WhereLost, split: str, hit: tuple[int, str] | None, key: str) -> None:
    """The steps a clicked bar counts (up to 50, rejections first), each openable in Decode."""
    if hit is None:
        st.caption("Click a bar to list the steps it counts.")
        return
    trace, x = hit
    if trace >= len(found.drafts):
        return
    draft = found.drafts[trace]
    if split == "by_position":
        row = next((r for r in draft.by_position if f"d{r.position}" == x), None)
        rows = [] if row is None else [(run, step, row.position, 0) for run, step in row.rejected_at]
        total = None if row is None else row.rejections  # None: kept by an older version
        what = f"{draft.name}, {x}: the steps that rejected it"
    else:
        group = next((g for g in getattr(draft, split) if _shown(g.group) == x), None)
        rows = [] if group is None else [tuple(e) for e in group.examples]
        total = None if group is None else group.attempts
        what = f"{draft.name}, {x}: its attempts, rejections first"
    if not rows:
        st.caption(f"{what}: none")
        return
    frame = pd.DataFrame(rows, columns=["run", "step", "draft position", "accepted"])
    frame["step"] = frame["step"] + 1  # Decode numbers steps from 1
    frame["accepted"] = frame["accepted"].map({1: "yes", 0: "no"})
    st.caption(
        f"{what}: all {len(rows)}"
        if total is None or total <= len(rows)
        else f"{what}: the first {len(rows)} of {total}"
    )
    event = st.dataframe(
        frame, hide_index=True, key=f"{key}_steps", on_select="rerun", selection_mode="single-row", height=180
    )
    picked = [r for r in getattr(getattr(event, "selection", None), "rows", None) or [] if r < len(rows)]
    if picked and st.button("Open this step in Decode", key=f"{key}_open"):
        _open(rows[picked[0]][0], rows[picked[0]][1])


def threshold_table(found: WhereLost) -> pd.DataFrame:
    rows = []
    for d in found.drafts:
        for t in d.threshold_whatif:
            rows.append(
                {
                    "draft": d.name,
                    "stop drafting below": "as run" if t.threshold is None else f"p < {t.threshold:.1f}",
                    "accept length, pooled over steps": t.accept_length,
                    "drafts per step": t.drafts_per_step,
                    "wasted drafts": t.wasted_drafts,
                    "accepted drafts lost": t.accepted_lost,
                    "predicted speed-up": t.speedup,
                }
            )
    return pd.DataFrame(rows)


def rejected(found: WhereLost) -> None:
    """The top rejected target tokens per draft; a row picked opens its first rejection in Decode."""
    listed = [(d, t) for d in found.drafts for t in d.top_rejected]
    frame = pd.DataFrame(
        [
            {
                "draft": d.name,
                "target's token": repr(t.text),
                "kind": t.kind,
                "rejections": t.rejections,
                "first steps (run:step)": ", ".join(f"{run}:{step + 1}" for run, step in t.examples),
            }
            for d, t in listed
        ]
    )
    event = st.dataframe(
        frame, hide_index=True, key="lost_rejected", on_select="rerun", selection_mode="single-row"
    )
    picked = [r for r in getattr(getattr(event, "selection", None), "rows", None) or [] if r < len(listed)]
    if picked and listed[picked[0]][1].examples:
        run, step = listed[picked[0]][1].examples[0]
        if st.button(f"Open run {run}, step {step + 1} in Decode", key="lost_rejected_open"):
            _open(run, step)


def _open(run: int, step: int) -> None:
    state.set_value("run", run)
    st.session_state["decode_step"] = step
    st.session_state["decode_slider"] = step + 1
    st.switch_page("pages/2_Decode.py")


@st.cache_data(show_spinner=False, max_entries=8)
def _file(db_url: str, run_ids: tuple[int, ...], fmt: str) -> bytes:
    """The download of these runs' tables, made once per set and format (not on every click)."""
    return lost.where_lost_file(where_lost(db_url, run_ids), fmt)


def downloads(db_url: str, run_ids: list[int]) -> None:
    """Every number on the page as one table (each row naming its definition), CSV or Parquet."""
    left, right = st.columns(2)
    # the runs the page used, as lost --runs takes them (a range's ends alone named runs it did not use)
    name = f"where_lost_{len(run_ids)}_runs_{id_ranges(run_ids).replace(',', '_')}"
    for column, fmt, mime in ((left, "csv", "text/csv"), (right, "parquet", "application/octet-stream")):
        column.download_button(
            f"Download the tables ({fmt.upper()})",
            _file(db_url, tuple(run_ids), fmt),
            file_name=f"{name}.{fmt}",
            mime=mime,
            key=f"lost_download_{fmt}",
        )


def ece_table(found: WhereLost) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "draft": d.name,
                "draft position": "all" if c.position is None else f"d{c.position}",
                "attempts": c.attempts,
                "ECE": c.ece,
                "Brier": c.brier,
                "AUROC": c.auroc,
            }
            for d in found.drafts
            for c in d.calibration
        ]
    )


def definitions() -> None:
    with st.expander("Definitions (every number on this page)"):
        st.markdown(
            "\n".join(f"- **{name.replace('_', ' ')}**: {text}" for name, text in DEFINITIONS.items())
        )
        st.caption(
            f"A group with fewer than {MIN_ATTEMPTS} attempts is shown grey, labelled too few to judge."
        )


TREE_HELP = (
    "A tree step's attempt at depth d: the target judged the children of the last accepted node (x_n at "
    "depth 1). Rank 0 is the sibling the draft scored highest (the one a chain drafts), 1 the next, 2+ any "
    "later: acceptances at rank 1 and later are what the tree's branches bought over a chain of the same "
    "depth; 'none' is a rejection of every sibling judged."
)
SAMPLED_HELP = (
    "Sampled chain steps: at each position, the share of attempts the draws accepted beside the mean of the "
    "recorded P(accepted | previous accepted) over the same attempts (the expected rate, free of the draws' "
    "noise); a gap wider than the draws' noise (about 2 * sqrt(p(1 - p) / attempts)) says the recorded "
    "probabilities and the draws disagree."
)


def tree_table(found) -> pd.DataFrame | None:
    """Per draft and tree depth: attempts, acceptances by sibling rank, rejections; None: no tree step."""
    rows = [
        {
            "draft": d.name,
            "depth": t.depth,
            "attempts": t.attempts,
            "accepted at rank 0 (a chain's draft)": t.accepted_by_rank[0],
            "accepted at rank 1": t.accepted_by_rank[1],
            "accepted at rank 2+": t.accepted_by_rank[2],
            "none accepted": t.rejected,
            "siblings judged (mean)": round(t.siblings, 2) if t.siblings is not None else None,
        }
        for d in found.drafts
        for t in d.tree_depths
    ]
    return pd.DataFrame(rows) if rows else None


def sampled_table(found) -> pd.DataFrame | None:
    """Per draft and position of sampled chains: attempts, realised and expected acceptance."""
    rows = [
        {
            "draft": d.name,
            "position": p.position,
            "attempts": p.attempts,
            "accepted by the draws": round(p.realized, 3),
            "expected from the recorded probabilities": round(p.expected, 3),
        }
        for d in found.drafts
        for p in d.sampled_positions
    ]
    return pd.DataFrame(rows) if rows else None
