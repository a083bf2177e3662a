"""Runs: history with filters, metrics, delete, export (CSV, JSON, Parquet); failed runs show their error."""

from __future__ import annotations

import streamlit as st

from backend import BadInput
from backend.service import runs as stored_runs
from ui import state
from ui.html import md
from ui.pickers import pick_among
from ui.runs import (
    ACCEPT_LENGTH_HELP,
    WALL_HELP,
    dataset_names,
    list_runs,
    run_facts,
    run_name,
    runs_frame,
    sample_labels,
)

st.set_page_config(page_title="SpecLens · Runs", layout="wide")
state.sidebar()
st.title("Runs")

deleted = st.session_state.pop("runs_deleted", None)
if deleted is not None:
    st.success(f"Run {deleted} deleted.")
runs = list_runs(limit=1000)
if not runs:
    st.info("No runs yet: start one on the Decode page or with `python -m backend replay`.")
    st.stop()
prompts = stored_runs.prompt_texts(runs)  # searched whole, beyond the label's start
labels = sample_labels(runs, dataset_names(), prompts)  # one name per run: the table, the picker, the facts
frame = runs_frame(runs, labels=labels)
c1, c2, c3 = st.columns(3)
statuses = c1.multiselect("Status", sorted(frame["status"].unique()), key="runs_filter_status")
drafts = c2.multiselect("Draft", sorted(frame["draft"].unique()), key="runs_filter_draft")
sample = c3.text_input(
    "Sample contains",
    key="runs_filter_sample",
    help="matches the sample's dataset name, index or source (HumanEval/2), or any text of its prompt",
)
shown = frame
if statuses:
    shown = shown[shown["status"].isin(statuses)]
if drafts:
    shown = shown[shown["draft"].isin(drafts)]
if sample:
    in_prompt = shown["run"].map(lambda run_id: sample.lower() in prompts.get(run_id, "").lower())
    shown = shown[shown["sample"].str.contains(sample, case=False, regex=False) | in_prompt]
st.dataframe(shown, hide_index=True, width="stretch", key="runs_table")
st.caption(
    f"{len(shown)} of {len(frame)} runs. {ACCEPT_LENGTH_HELP}; acceptance rate = accepted drafts / drafted "
    f"tokens; {WALL_HELP}."
)

run_ids = shown["run"].tolist()
if not run_ids:
    st.stop()
by_id = {r.id: r for r in runs}
# the picker names a run as the table does; it decides the facts, export and delete
run_id = pick_among("Run", run_ids, "runs_pick", lambda i: run_name(by_id[i], labels[i]))
run, steps = stored_runs.get_run_with_steps(state.db(), run_id)
if run is None:
    st.warning(f"Run {run_id} no longer exists.")
    st.stop()
if run.error:
    st.error(f"Run {run.id} {run.status}: {md(run.error.splitlines()[0])}")
    with st.expander("Full error"):
        st.code(run.error)
st.dataframe(
    run_facts(run, len(steps), labels.get(run.id)), hide_index=True, key="runs_facts", width="stretch"
)
with st.expander("Everything stored with this run (parameters and metrics, JSON)"):
    st.json({"params": run.params, "metrics": run.metrics}, expanded=True)
left, middle, right, last = st.columns(4)
for column, fmt, mime in (
    (left, "csv", "text/csv"),
    (middle, "json", "application/json"),
    (right, "parquet", "application/octet-stream"),
):
    column.download_button(
        f"Export {fmt.upper()}",
        stored_runs.run_file(run, steps, fmt),
        file_name=f"run_{run.id}.{fmt}",
        mime=mime,
        key=f"runs_export_{fmt}",
    )
if last.button("Open in Decode", key="runs_open"):
    state.set_value("run", run.id)
    st.switch_page("pages/2_Decode.py")
with st.expander("Delete this run"):
    # ticked per run: after a delete the picker moves to another run, whose box starts unticked, so a
    # second click cannot delete it
    sure = st.checkbox(
        f"Delete run {run.id} with its {len(steps)} steps, for good", key=f"runs_delete_sure_{run.id}"
    )
    if st.button(f"Delete run {run.id}", type="primary", key="runs_delete", disabled=not sure):
        try:
            stored_runs.delete_run(state.db(), run.id)
        except BadInput as error:
            st.error(md(error))
        else:
            st.session_state["runs_deleted"] = run.id  # said after the rerun, which would wipe it here
            st.rerun()
