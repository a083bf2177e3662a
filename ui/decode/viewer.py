"""The Decode page's step viewer: navigation, the step's drafted chips (and tree), the output with
step boundaries, the hidden-state rows of the step's positions, and a page-wide heatmap of a window
around the step, opening on the cosine to a reference when the run has one."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from backend.diagnostics.mismatch import ChunkRow
from backend.run.records import StepRecord
from backend.service import runs as stored_runs
from backend.service.runs import RunInfo
from ui import charts, state
from ui.charts import chunk_labels
from ui.clickable import clickable_steps
from ui.html import CSS, chips_html, context_html, legend, output_html, step_statuses
from ui.tokens import Pieces
from ui.tree import tree_figure

NORMS = "fed features only (norms)"
WINDOWS = {"128 positions around the step": 64, "512 positions around the step": 256, "the whole run": None}
TREE_CAPTION = (
    "The step's draft tree: {nodes} nodes, depth left to right, siblings stacked (highest draft "
    "probability on top); q = draft probability given the parent, s = score (product of q along the "
    "path). Green: accepted path; red: the first rejected node; hover a node for the target's "
    "probability, its argmax and the draw."
)


def next_rejection(steps: list[StepRecord], current: int) -> int | None:
    """The first step after `current` that rejected a draft."""
    return next(
        (i for i in range(current + 1, len(steps)) if steps[i].accepted_count < len(steps[i].drafted_ids)),
        None,
    )


def _move(steps: list[StepRecord], delta: int = 0, to_rejection: bool = False) -> None:
    current = st.session_state.get("decode_step", 0)
    if to_rejection:
        later = next_rejection(steps, current)
        current = current if later is None else later
    else:
        current = min(max(0, current + delta), len(steps) - 1)
    st.session_state["decode_step"] = current
    st.session_state["decode_slider"] = current + 1


@st.cache_resource(show_spinner=False, max_entries=16)
def token_stats(db_url: str, run_id: int, reference: str | None, version: int, freshness) -> list[ChunkRow]:
    """Cached per run state: `freshness` (finish time, stored steps) changes while a run records and
    when it ends, so rows read mid-run are never shown for the finished run. A shared resource, not
    a copy per call (cache_data unpickles thousands of rows at every step click): read-only here."""
    return [ChunkRow.from_dict(row) for row in stored_runs.token_stats(db_url, run_id, reference)]


def _navigation(steps: list[StepRecord], current: int) -> None:
    buttons = st.columns([1.4, 1.1, 2.6, 4.9])
    buttons[0].button(
        "◀ Previous", key="decode_prev", on_click=_move, args=(steps, -1), disabled=current == 0
    )
    buttons[1].button(
        "Next ▶", key="decode_next", on_click=_move, args=(steps, 1), disabled=current >= len(steps) - 1
    )
    upcoming = next_rejection(steps, current)
    buttons[2].button(
        "No later rejection" if upcoming is None else f"Next rejection: step {upcoming + 1} »",
        key="decode_next_rejection",
        on_click=_move,
        args=(steps,),
        kwargs={"to_rejection": True},
        disabled=upcoming is None,
        help="The first step after this one where the target rejected a draft (it may be the next step).",
    )
    if len(steps) > 1:
        st.slider(
            "Verify step",
            1,
            len(steps),
            key="decode_slider",
            on_change=lambda: st.session_state.update(decode_step=st.session_state["decode_slider"] - 1),
            help="Steps count from 1 to the run's verify steps. Arrow keys move the slider once it has "
            "focus; Tab reaches the buttons; clicking a token of the output below jumps to its step.",
        )


def _step_headline(run: RunInfo, step: StepRecord, current: int, count: int) -> str:
    rejected = (
        f"rejected at d{step.accepted_count + 1}"
        if "rejected" in step_statuses(step.drafted_ids, step.accepted_count)
        else "all accepted"
    )
    if step.tree and run.resolved.topk > 1:
        what = (
            f"accepted a path of {step.accepted_count} of the tree's {len(step.tree.tokens)} nodes "
            f"(main path: {len(step.drafted_ids)} deep, {rejected}); "
        )
    elif not step.is_verify_step:
        what = "a plain decode of the pending token, no draft (llama.cpp's last token: not a verify step); "
    else:
        what = f"accepted {step.accepted_count} of {len(step.drafted_ids)} drafts ({rejected}); "
    return (
        f"**Step {current + 1}** of {count}: pending token at position {step.position}; {what}"
        f"draft {step.draft_ms:.1f} ms, verify {step.verify_ms:.1f} ms"
    )


def _tokens(run: RunInfo, steps: list[StepRecord], current: int, pieces: Pieces) -> None:
    step = steps[current]
    st.markdown(_step_headline(run, step, current, len(steps)))
    st.caption("Recent context (up to the pending token)")
    st.html(CSS + context_html((run.prompt_ids + run.output_ids)[: step.position + 1], pieces))
    st.caption(
        "Drafted tokens: draft probability, top-5 alternatives, and the target's argmax at the same "
        "verify row (greedy: a rejection is where they differ; sampled: the chip shows the draw)"
    )
    st.html(CSS + legend() + chips_html(step, pieces))
    if step.tree and not run.resolved.greedy_chain:
        expected = step.tree.expected_accepted
        st.caption(
            TREE_CAPTION.format(nodes=len(step.tree.tokens))
            + ("" if expected is None else f" Expected accepted here: {expected:.2f}.")
        )
        st.plotly_chart(tree_figure(step.tree, step.pending_token, pieces), key="decode_tree")
    st.caption(
        "Output (step boundaries marked, current step outlined; a window of steps around it). "
        "Click a token to open the step that produced it."
    )
    first = run.output_ids[0] if run.output_ids else None
    clicked = clickable_steps(CSS + output_html(first, steps, pieces, current, window=30), "decode_output")
    if clicked is not None and clicked != current and 0 <= clicked < len(steps):
        st.session_state["decode_step"] = clicked
        st.rerun(scope="fragment")


def _reference_rows(run: RunInfo, steps: list[StepRecord]) -> tuple[str, list[ChunkRow]]:
    """The reference picker (the newest reference selected when the run has one) and its rows."""
    options = [NORMS] + stored_runs.token_stat_references(state.db(), run.id)
    pending = st.session_state.pop("decode_reference_pending", None)
    if pending in options:
        st.session_state["decode_reference"] = pending
    elif st.session_state.get("decode_reference") not in options:
        st.session_state["decode_reference"] = options[-1]  # the comparison, when there is one
    reference = st.selectbox("Reference", options, key="decode_reference")
    version = st.session_state.get("decode_stats_version", 0)
    freshness = (run.finished_at, run.step_count, len(steps))
    chosen = None if reference == NORMS else reference
    return reference, token_stats(state.db(), run.id, chosen, version, freshness)


SHORT_COLUMNS = {
    "norm": "norm",
    "cosine": "cosine",
    "norm_ratio": "norm ratio",
    "relative_error": "rel. error",
}


def _rows_table(step: StepRecord, reference: str, rows: list[ChunkRow]) -> None:
    window = set(range(step.position, step.position + step.accepted_count + 1))
    here = [r for r in rows if r.position in window]
    if here:
        frame = pd.DataFrame([r.to_dict() for r in here])
        frame = frame.drop(columns=["reference"]).dropna(axis="columns", how="all")
        frame["chunk"] = frame["chunk"].map(chunk_labels(frame["chunk"]))
        frame = frame.rename(columns=SHORT_COLUMNS)
        # against a reference the comparison columns are what the row says; the fed norm alone is
        # the norms view's (the panel is narrow: every column must fit beside the tokens)
        shown = (
            SHORT_COLUMNS.values()
            if reference == NORMS
            else [c for c in SHORT_COLUMNS.values() if c != "norm"]
        )
        frame = frame[[c for c in ("position", "chunk", *shown) if c in frame.columns]]
        # a static table: a step click redraws it, and a grid widget costs more to mount than to read;
        # every row carries its position and chunk (a step covers several positions)
        st.table(frame.style.hide(axis="index").format(precision=4, na_rep="—"))
        if reference.startswith("target hidden"):
            st.caption(
                "Cosine of the draft's output hidden with the target's last hidden at the same position. "
                "The draft is trained so that the logits of the two agree, not the vectors: read this row "
                "across positions (where it drops, the draft lost track), not as good or bad on its own. "
                "The fed features compare directly with another wiring or the training features (below). "
                "Once a wiring probe of this draft ran (Diagnostics), new runs open on the wiring it found, "
                "kept in the database for every later server."
            )
        if reference == NORMS:
            st.caption(
                "Norms of the features the draft was fed. To compare them with another wiring, the "
                "training features, a second run or the target's own hidden, add a reference below."
            )
    elif rows:
        st.caption(
            f"No rows for positions {step.position}..{step.position + step.accepted_count} under this "
            f"reference: it covers positions {min(r.position for r in rows)}.."
            f"{max(r.position for r in rows)}."
        )
    else:
        st.caption("No rows stored under this reference.")


def _heatmap(step: StepRecord, current: int, reference: str, rows: list[ChunkRow]) -> None:
    """Page-wide, over a window of positions around the step (each column one position unless the
    window is wider than the chart's columns)."""
    value = "norm" if reference == NORMS else "cosine"
    left, right = st.columns([3, 1])
    span = WINDOWS[left.radio("Heatmap window", list(WINDOWS), horizontal=True, key="decode_heatmap_window")]
    auto = right.toggle(
        "Auto colour range", key="decode_heatmap_auto", help="Off: the scale is fixed by meaning."
    )
    if span is not None:
        centre = step.position + step.accepted_count // 2
        rows = [r for r in rows if centre - span <= r.position <= centre + span]
    if not rows:
        st.caption("No hidden-state rows in this window.")
        return
    positions = [r.position for r in rows]
    what = "norm of the fed features" if value == "norm" else f"cosine to {reference}"
    st.plotly_chart(
        charts.heatmap(
            rows,
            value,
            f"{what} · positions {min(positions)}..{max(positions)} · step {current + 1} outlined",
            mark=(step.position, step.position + step.accepted_count),
            auto_range=auto,
        ),
        key="decode_heatmap",
        width="stretch",
    )


@st.fragment
def viewer(run: RunInfo, steps: list[StepRecord]) -> None:
    """One fragment: a step click reruns only this, not the page."""
    current = min(st.session_state.get("decode_step", 0), len(steps) - 1)
    st.session_state["decode_slider"] = current + 1  # one source of truth: decode_step (0-based)
    _navigation(steps, current)
    step = steps[current]
    left, right = st.columns([3, 2])
    with left:
        _tokens(run, steps, current, Pieces(run.target_path))
    with right:
        st.markdown("**Hidden states at this step's positions**")
        reference, rows = _reference_rows(run, steps)
        _rows_table(step, reference, rows)
    if rows:
        _heatmap(step, current, reference, rows)
