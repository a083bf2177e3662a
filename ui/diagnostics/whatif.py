"""The speed-up what-if tab: accept length and speed-up at other K (or a tree) predicted from a run,
and a real replay at those settings to check the prediction."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import streamlit as st

from backend import BadInput
from backend.diagnostics.whatif import MODEL, TREE_MODEL, WhatIfRow, predict, predict_tree
from backend.run.records import verify_counts
from backend.service import tasks
from backend.service.runs import RunInfo
from ui import charts, state
from ui.numbers import whole
from ui.pickers import run_label
from ui.runs import ACCEPT_LENGTH_HELP, get_run, list_runs
from ui.taskview import task_panel

DFLASH_WHATIF = (
    "A DFlash run: no prediction at another K. Its block of K + 1 positions is one forward whose every "
    "position attends to every other, so each draft changes with K, and its draft cost is one forward "
    "whatever K: the per-position rates and the linear draft cost this model reads (an EAGLE-3 chain's) "
    "do not carry to another K. Replay at the K you want below and read the measured accept length "
    "(trees: a DFlash step proposes one block, topk 1 only)."
)
FEW_STEPS = 50  # verify steps under which a run's per-position rates are too few to choose K from


def _largest(runs: list[RunInfo], draft: str) -> RunInfo:
    """The run the tab opens on: the sidebar draft's with the most verify steps, else any draft's."""
    mine = [r for r in runs if Path(r.draft_path).resolve() == Path(draft).resolve()] or runs
    return max(mine, key=lambda r: (sum(r.measured.accept_histogram), r.id))


def _chain_runs() -> list[RunInfo]:
    """Finished greedy chain runs: the model reads a chain's acceptance."""
    return [
        r
        for r in list_runs(limit=200)
        if r.status == "finished" and r.measured.accept_histogram and r.resolved.greedy_chain
    ]


# the table's headers in words, not WhatIfRow's field names
WHATIF_HEADERS = {
    "num_steps": "K (draft tokens per step)",
    "predicted_accept_length": "predicted accept length",
    "predicted_speedup": "predicted speed-up",
    "extrapolated": "extrapolated",
}


def whatif_table(rows: list[WhatIfRow]) -> pd.DataFrame:
    return pd.DataFrame([r.to_dict() for r in rows], columns=list(WHATIF_HEADERS)).rename(
        columns=WHATIF_HEADERS
    )


def _tree_prediction(steps, shape: tuple[int, int, int], tokens_given: bool):
    if shape[1] == 1:
        return None
    if not tokens_given:
        st.info("Set the draft tokens N: SGLang needs --speculative-num-draft-tokens with topk > 1.")
        return None
    guess = predict_tree(steps, *shape)
    if guess is None:
        st.info("A tree prediction needs a recorded greedy run (its top alternatives).")
        return None
    st.markdown(
        f"Tree (steps {shape[0]}, topk {shape[1]}, N {shape[2]}): predicted accept length "
        f"**{guess.predicted_accept_length:.2f}**"
        + (" (N - 1 < topk x steps: the budget may cut siblings)" if guess.budget_limited else "")
        + (" (extrapolated past the recorded depth or alternatives)" if guess.extrapolated else ""),
        help=TREE_MODEL,
    )
    return guess


def _keep_measurement(result) -> None:
    """`result`: the replay's ReplayResult (backend/service/tasks.py)."""
    checked_run, checked, _ = st.session_state.get("whatif_pending", (None, None, None))
    if checked_run is not None and checked[1] == 1:  # chains join the chart at their K
        measured = st.session_state.setdefault("whatif_measured", {}).setdefault(checked_run, {})
        measured[checked[0]] = result.mean_accept_length


def _check_replay(run: RunInfo, shape: tuple[int, int, int], tokens: int, predicted) -> None:
    """Start the replay of the run's prompt at `shape` (steps, topk, N)."""
    try:
        if run.request is None:
            raise BadInput(
                f"run {run.id}: its request cannot be read back (no prompt, or settings this version refuses)"
            )
        request = replace(  # the run's own request at the new shape
            run.request,
            num_steps=shape[0],
            max_new_tokens=max(1, len(run.output_ids)),
            topk=shape[1],
            num_draft_tokens=tokens or None,
        )
    except BadInput as error:
        st.error(str(error))
        return
    st.session_state["whatif_pending"] = (run.id, shape, predicted)
    st.session_state["whatif_task"] = tasks.start_replay(
        state.db(), request, label=f"what-if check steps={shape[0]} topk={shape[1]} N={shape[2]}"
    )


def _checker(run: RunInfo, steps, rows: list[WhatIfRow]) -> None:
    st.markdown("**Check with a real replay** (SGLang's flags; topk 1 is a chain of K)")
    num_steps = run.resolved.num_steps
    w1, w2, w3 = st.columns(3)
    other_k = whole(w1, "K (steps)", 1, 8, 2 if num_steps != 2 else 3, "whatif_k")
    other_topk = whole(w2, "topk", 1, 16, 1, "whatif_topk")
    tokens = whole(w3, "Draft tokens N (0: K+1)", 0, 256, 0 if other_topk == 1 else 8, "whatif_tokens")
    if None in (other_k, other_topk, tokens):
        return  # said under the field
    shape = (other_k, other_topk, tokens or other_k + 1)
    guess = _tree_prediction(steps, shape, bool(tokens))
    if st.button("Replay with these settings", key="whatif_replay"):
        predicted = (
            guess.predicted_accept_length
            if guess is not None
            else next((r.predicted_accept_length for r in rows if r.num_steps == other_k), None)
        )
        _check_replay(run, shape, tokens, predicted)

    def show(result) -> None:
        checked_run, checked, predicted = st.session_state.get("whatif_pending", (None, None, None))
        if checked_run == run.id and result.mean_accept_length is not None:
            st.success(
                f"steps {checked[0]}, topk {checked[1]}, N {checked[2]}: measured accept length "
                f"{result.mean_accept_length:.2f} (run {result.run_id})"
                + ("" if predicted is None else f", predicted {predicted:.2f}")
            )

    task_panel("whatif_task", show, on_finish=_keep_measurement)


def whatif_tab() -> None:
    st.markdown(
        "Predict accept length and speed-up for other K from a run's measured per-position conditional "
        "acceptance and draft/verify times; check the prediction against a real replay at another K."
    )
    runs = _chain_runs()
    if not runs:
        st.info(
            "Needs a finished greedy chain run (the model reads a chain's acceptance): start one on Decode."
        )
        return
    labels = {r.id: run_label(r) for r in runs}
    largest = _largest(runs, state.draft_path())
    run_id = st.selectbox(
        "Run",
        list(labels),
        index=list(labels).index(largest.id),
        key="whatif_run",
        format_func=labels.get,
        help="Opens on the sidebar draft's run with the most verify steps (else any draft's): a prediction "
        "reads each position's rate from the run's steps, so the larger run predicts better.",
    )
    run, steps = get_run(run_id)
    num_steps = run.resolved.num_steps
    counts = verify_counts(steps)
    size = f"Run {run.id}: {len(counts)} verify steps, {len(run.output_ids)} tokens."
    if len(counts) < FEW_STEPS:
        st.warning(
            f"{size} Each position's acceptance below is read from at most {len(counts)} steps: the predicted "
            f"accept lengths and the best K can move with a few steps more. Pick a run of {FEW_STEPS} or more "
            "verify steps (an evaluation's, or a longer replay) before choosing K from it."
        )
    else:
        st.caption(size)
    draft_ms, verify_ms = run.measured.draft_ms_total, run.measured.verify_ms_total
    if run.measured.batch_size:
        st.warning(
            f"Run {run.id} was replayed in a batch of {run.measured.batch_size} samples: its draft and verify "
            "times are its shares of batch forwards, not what one served step costs, so the speed-ups below "
            "use costs no single request pays. Its accept lengths hold; for speed-ups pick a run replayed alone."
        )
    if run.resolved.draft_method == "dflash":
        st.warning(DFLASH_WHATIF)
        _checker(run, steps, [])
        return
    if run.request is not None and run.request.via == "trace":
        st.warning(
            f"Run {run.id} was replayed over a trace: its verify times are reads of rows the target computed "
            "once, not target forwards, so the speed-ups below are not a served step's. Its accept lengths "
            "hold; for speed-ups pick a run replayed step by step (--via step)."
        )
    rows = predict(counts, num_steps, draft_ms, verify_ms)
    measured = {
        num_steps: run.measured.mean_accept_length,
        **st.session_state.get("whatif_measured", {}).get(run_id, {}),
    }
    st.plotly_chart(charts.whatif(rows, measured), key="whatif_chart")
    st.dataframe(whatif_table(rows), hide_index=True, key="whatif_table")
    st.caption(f"Model: {MODEL}. {ACCEPT_LENGTH_HELP}. 'extrapolated' rows reuse the last measured rate.")
    _checker(run, steps, rows)
