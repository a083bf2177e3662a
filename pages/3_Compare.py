"""Compare: two drafts (or two existing runs) on the same sample, and a batch over a dataset. The
render code lives in ui/compare/; this page reads the form, starts the one job, and renders."""

from __future__ import annotations

import streamlit as st

from backend import BadInput
from backend.service import tasks
from ui import state
from ui.compare import batch, form, pair
from ui.html import md
from ui.runs import get_run, list_runs
from ui.taskview import task_panel

st.set_page_config(page_title="SpecLens · Compare", layout="wide")
state.sidebar()
st.title("Compare")

compare_task = tasks.MANAGER.get(st.session_state.get("compare_task"))
running = compare_task is not None and compare_task.active
asked = form.comparison(running)
if asked is not None:
    try:
        st.session_state["compare_task"] = tasks.start_compare(state.db(), asked)
    except BadInput as error:
        st.error(md(error))
    else:
        st.rerun()  # drawn again as running: buttons off, the previous table hidden, progress


def pick_up(result: tasks.CompareResult) -> None:
    """A finished comparison: its table replaces the previous one and its first row (the largest
    |delta|; the only one for a single sample) is opened below."""
    first = result.rows[0]
    state.set_value("compare", (first.run_a, first.run_b))
    st.session_state["compare_result"] = (st.session_state.get("compare_task"), result)


task_panel("compare_task", on_finish=pick_up, adopt="compare")
shown = st.session_state.get("compare_result")  # (the task that made it, the CompareResult)
if shown and running:
    st.info(
        f"The previous comparison's table ({len(shown[1].rows)} sample(s)) is hidden while a new "
        "comparison runs; the new table shows here when it ends."
    )
elif shown:
    batch.show_batch(*shown)

st.subheader("Two runs side by side")
runs = list_runs(limit=300)
if len(runs) < 2:
    st.info("Need two runs: start them above or on the Decode page.")
    st.stop()
run_a_id, run_b_id = pair.pick_pair(runs)
(run_a, steps_a), (run_b, steps_b) = get_run(run_a_id), get_run(run_b_id)
if run_a is None or run_b is None:
    st.error("A chosen run no longer exists.")
    st.stop()
pair.show_pair(run_a, steps_a, run_b, steps_b)
