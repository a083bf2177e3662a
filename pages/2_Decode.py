"""Decode: start a replay in the background, then step through it with the hidden-state panel.
The render code lives in ui/decode/; this page reads the form, starts the one job, and renders."""

from __future__ import annotations

import time

import streamlit as st

from backend.service import reference_spec, tasks
from backend.service import runs as stored_runs
from ui import state
from ui.decode import form, header, references, summary, viewer
from ui.runs import get_run, list_runs
from ui.taskview import task_panel

st.set_page_config(page_title="SpecLens · Decode", layout="wide")
state.sidebar()
st.title("Decode")

request = form.replay_request(expanded=not list_runs(limit=1))
if request is not None:
    # the step viewer opens on a comparison that tells healthy from broken (reference_spec.default_reference)
    fed = list(request.aux_hf_indices) if request.aux_hf_indices else None
    reference = reference_spec.default_reference(request.target, request.draft, fed, state.db())
    st.session_state["decode_task"] = tasks.start_replay(state.db(), request, reference=reference)


def pick_up_run(result: tasks.ReplayResult) -> None:
    state.set_value("run", result.run_id)
    st.session_state["decode_step"] = 0
    if result.reference:
        st.session_state["decode_reference_pending"] = result.reference


def show_replay(result: tasks.ReplayResult) -> None:
    if result.reference_note:
        st.caption(
            f"No hidden-state comparison was computed for run {result.run_id}: {result.reference_note}"
        )


task_panel("decode_task", show_replay, on_finish=pick_up_run, failure="The replay failed: ", adopt="replay")

runs = list_runs(limit=200)
if not runs:
    running = any(t.active for t in tasks.MANAGER.list("replay"))
    st.info(
        "A replay is running: its run opens here when it ends (progress above)."
        if running
        else "No run yet: start one above."
    )
    st.stop()
run, steps = get_run(header.pick_run(runs))
if run is None:
    st.error("That run is gone (deleted?).")
    st.stop()
header.status(run, steps)
header.summary(run, steps)
header.readings(run)
if not steps:
    header.no_steps(run)
    st.stop()

viewer.viewer(run, steps)
has_reference = bool(stored_runs.token_stat_references(state.db(), run.id))
references.open_on_default(run, has_reference)
references.reference_adder(run, expanded=not has_reference)
summary.run_summary(run, steps)
summary.served_by_vllm(run, steps)

if run.status == "running" and not tasks.MANAGER.get(st.session_state.get("decode_task")):
    # A run recording elsewhere (the CLI, or a job this browser session lost on reload): the page
    # re-reads it every 2 s until it ends, so its numbers are never a stale snapshot.
    time.sleep(2.0)
    st.rerun()
