"""Two runs side by side: the pair picker, their accept lengths and where they first differ, the
aligned timelines and the overlaid per-position acceptance."""

from __future__ import annotations

import streamlit as st

from backend.run.records import StepRecord
from backend.service.runs import RunInfo
from ui import charts, state
from ui.compare.timeline import (
    committed_positions,
    difference_html,
    first_divergence,
    first_output_difference,
    timeline_html,
    timeline_legend,
)
from ui.html import CSS, md
from ui.pickers import prompt_tail, run_label
from ui.runs import ACCEPT_LENGTH_HELP
from ui.tokens import Pieces

WINDOW = 300  # output tokens drawn at once
DRAFTS_HELP = (
    "The first output position (0 = the first output token) where the two drafts proposed different "
    "tokens: outlined below, and said in words under the timelines"
)
OUTPUTS_HELP = (
    "The first output position where the two runs emitted different tokens (different prompts, sampling, "
    "or a non-greedy run); nowhere: the same output token for token. In greedy mode both outputs are the "
    "target's own and never differ; the drafts' proposals can."
)


def _picked_here() -> None:
    """The user picked a run in a select box: that pair is the shared choice now, so a row clicked
    later (even the one clicked before) opens its pair again."""
    chosen = (st.session_state["compare_run_a"], st.session_state["compare_run_b"])
    state.set_value("compare", chosen)
    state.followed("compare_run_a", chosen[0])
    state.followed("compare_run_b", chosen[1])


def shown_pair(run_ids: list[int], finished: list[int] | None = None) -> tuple[int, int] | None:
    """The two runs side by side: the comparison last finished or picked, else the two newest finished
    runs (`finished`, newest first; else the two newest runs). The form's draft pickers follow the same
    pair."""
    newest = finished if finished is not None and len(finished) >= 2 else run_ids
    return state.get_value("compare") or ((newest[1], newest[0]) if len(newest) >= 2 else None)


def pick_pair(runs: list[RunInfo]) -> tuple[int, int]:
    run_ids = [r.id for r in runs]
    preset = shown_pair(run_ids, [r.id for r in runs if r.status == "finished"])
    label = {r.id: run_label(r, unfinished_al=False) for r in runs}  # as _metrics shows them
    left, right = st.columns(2)
    chosen = []
    for column, side, key, fallback in ((left, 0, "compare_run_a", 0), (right, 1, "compare_run_b", 1)):
        shown = state.follow(key, preset[side], run_ids, fallback)  # a finished comparison or a ticked row
        chosen.append(
            column.selectbox(
                f"Run {'AB'[side]}", run_ids, format_func=label.get, key=key, on_change=_picked_here, **shown
            )
        )
    return chosen[0], chosen[1]


def _metrics(
    run_a: RunInfo, steps_a, run_b: RunInfo, steps_b, divergence: int | None, same_prompt: bool
) -> None:
    # an unfinished run's accept length is of the steps it kept: not shown as the run's
    al_a, al_b = (r.measured.mean_accept_length if r.status == "finished" else None for r in (run_a, run_b))
    cells = st.columns(5)
    cells[0].metric("Accept length A", _shown(al_a), help=ACCEPT_LENGTH_HELP)
    cells[1].metric(
        "Accept length B",
        _shown(al_b),
        delta=None if al_a is None or al_b is None else f"{al_b - al_a:+.2f}",
        help=ACCEPT_LENGTH_HELP,
    )
    cells[2].metric("Steps A / B", f"{len(steps_a)} / {len(steps_b)}")
    if not same_prompt:  # positions of two prompts are not the same text: nothing to say position by position
        cells[3].metric(
            "Drafts first differ at", "—", help=f"{DRAFTS_HELP}. Not compared: the prompts differ"
        )
        cells[4].metric(
            "Outputs first differ at", "—", help=f"{OUTPUTS_HELP}. Not compared: the prompts differ"
        )
    else:
        cells[3].metric(
            "Drafts first differ at",
            "nowhere" if divergence is None else f"output {divergence - len(run_a.prompt_ids)}",
            help=DRAFTS_HELP,
        )
        outputs = first_output_difference(run_a.output_ids, run_b.output_ids, lengths=True)
        cells[4].metric(
            "Outputs first differ at",
            "nowhere" if outputs is None else f"output {outputs}",
            help=OUTPUTS_HELP,
        )
    st.caption(f"A: {side_of(run_a)} · B: {side_of(run_b)}")
    for side, run in (("A", run_a), ("B", run_b)):
        if run.status != "finished":
            st.warning(
                f"Run {side} is {md(run.status)}, not finished: it has no accept length, and its output stops "
                f"after {len(run.output_ids)} tokens, so the outputs differ where it "
                "stopped, not because of the drafts. Compare finished runs (Runs lists them).",
                icon="⚠️",
            )


def _shown(accept_length) -> str:
    """A run without an accept length (unfinished, or no verify step) shows a dash, never 0.00."""
    return "—" if accept_length is None else f"{accept_length:.2f}"


def show_pair(run_a: RunInfo, steps_a: list[StepRecord], run_b: RunInfo, steps_b: list[StepRecord]) -> None:
    same_prompt = run_a.prompt_ids == run_b.prompt_ids
    if not same_prompt:
        st.warning(
            "The two runs have different prompts: their drafts are not compared position by position (the "
            "same position holds different text); each row below shows its own run's output. Compare two "
            "runs of one sample for where the drafts differ."
        )
    positions_a, positions_b = committed_positions(run_a, steps_a), committed_positions(run_b, steps_b)
    divergence = first_divergence(positions_a, positions_b) if same_prompt else None
    _metrics(run_a, steps_a, run_b, steps_b, divergence, same_prompt)
    pieces = Pieces(run_a.target_path)
    length = max(len(run_a.output_ids), len(run_b.output_ids))
    offset = (
        st.slider("Output window start", 0, length - 1, 0, step=50, key="compare_offset")
        if length > WINDOW
        else 0
    )

    def window(run: RunInfo) -> tuple[int, int]:  # the same output positions of each run
        start = len(run.prompt_ids) + offset
        return start, start + WINDOW

    for side, run in (("A", run_a), ("B", run_b)) if not same_prompt else (("", run_a),):
        st.caption(
            f"Run {side}'s prompt ends:" if side else "The prompt ends (the outputs below continue it):"
        )
        st.code(prompt_tail(run.prompt_ids, run.target_path), language=None, wrap_lines=True)
    st.html(
        CSS
        + timeline_legend()
        + "<b>A</b>"
        + timeline_html(run_a, positions_a, pieces, *window(run_a), divergence)
        + "<b>B</b>"
        + timeline_html(run_b, positions_b, pieces, *window(run_b), divergence)
        + (difference_html(run_a, run_b, positions_a, positions_b, pieces) if same_prompt else "")
    )
    st.caption(
        "Each token is coloured by how its run produced it; hover a token for its output position, "
        "verify step and what the draft proposed there. Tokens in quotes show whitespace: ␣ is a space."
    )
    st.plotly_chart(
        charts.acceptance_bars(
            {
                "A marginal": list(run_a.measured.per_position_marginal),
                "B marginal": list(run_b.measured.per_position_marginal),
            },
            "Per-position acceptance P(a >= i), overlaid",
        ),
        key="compare_bars",
    )


def side_of(run) -> str:
    """A run's decoding, and where its target came from when it was a trace (docs/traces.md)."""
    forward = run.resolved.target_forward or ""
    return run.resolved.mode + (f" over a {forward}" if forward.startswith("trace") else "")
