"""The Decode page's reference adder: compare the fed features with another source, as a
background job whose end selects the new reference in the step viewer."""

from __future__ import annotations

import streamlit as st

from backend import BadInput
from backend.run.wiring import parse_aux_indices
from backend.service import reference_spec, tasks
from backend.service.reference_spec import ReferenceResult, ReferenceSpec
from backend.service.runs import RunInfo
from ui import state
from ui.html import md
from ui.pickers import run_label
from ui.runs import list_runs
from ui.taskview import task_panel

KINDS = ["another wiring", "training features (.ckpt)", "a second run", "target hidden vs draft output"]


def _spec(kind: str, run: RunInfo) -> ReferenceSpec | None:
    """The reference job's spec from the chosen kind's widgets (None: nothing to compute yet)."""
    if kind == "another wiring":
        suggested = reference_spec.default_reference(
            run.target_path, run.draft_path, list(run.aux_hf_indices), state.db()
        )
        wiring = suggested.aux_hf_indices or run.aux_hf_indices
        text = st.text_input(
            "HF indices",
            ",".join(map(str, wiring)),
            key=f"decode_reference_wiring_{run.id}",
            help=f"Prefilled with {(suggested.why or 'the run') if suggested.aux_hf_indices else 'the wiring the run fed'}.",
        )
        return ReferenceSpec("wiring", list(parse_aux_indices(text) or ()))
    if kind == "training features (.ckpt)":
        path = st.text_input("Feature file", "demo/data/features/data_0.ckpt", key="decode_reference_ckpt")
        return ReferenceSpec("features", path=path)
    if kind == "a second run":
        others = [r for r in list_runs(limit=200) if r.id != run.id]
        if not others:
            st.caption("No other run to compare with.")
            return None
        labels = {r.id: run_label(r) for r in others}
        picked = st.selectbox("Run", list(labels), format_func=labels.get, key="decode_reference_run")
        return ReferenceSpec("run", run_id=picked)
    return ReferenceSpec("target_hidden")


def _show(result: ReferenceResult) -> None:
    st.success(
        f"{result.rows} rows stored as '{md(result.reference)}' ({result.positions} positions compared)"
    )
    if result.warning:
        st.warning(md(result.warning))


def _pick_up(result: ReferenceResult) -> None:
    st.session_state["decode_stats_version"] = st.session_state.get("decode_stats_version", 0) + 1
    st.session_state["decode_reference_pending"] = result.reference  # selected on the next run


def reference_adder(run: RunInfo, expanded: bool) -> None:
    """Outside the step viewer's fragment: the reference job's progress polls on its own, and its end
    reruns the whole page, which then shows the new reference selected."""
    with st.expander(
        "Add a hidden-state reference (compare the fed features with another source)", expanded=expanded
    ):
        kind = st.radio("Compare the fed features with", KINDS, key="decode_reference_kind")
        try:
            spec = _spec(kind, run)
        except BadInput as error:
            st.error(str(error))
            spec = None
        if st.button("Compute", key="decode_reference_compute", disabled=spec is None):
            st.session_state["decode_reference_task"] = tasks.start_reference(state.db(), run.id, spec)
    task_panel("decode_reference_task", _show, on_finish=_pick_up, adopt="reference")


def open_on_default(run: RunInfo, has_reference: bool) -> None:
    """A finished, recorded run with no comparison yet opens on the one that tells healthy from broken
    when there is one (a stored probe's wiring or what a serving engine feeds instead), whoever
    started it: Compare, the CLI, evaluate, not only Decode's own form. Started once per run and
    browser session, as the reference adder's job."""
    started = st.session_state.setdefault("decode_auto_references", set())
    if has_reference or run.id in started or run.status != "finished" or not run.artifact_path:
        return
    started.add(run.id)
    reference = reference_spec.default_reference(
        run.target_path, run.draft_path, list(run.aux_hf_indices), state.db()
    )
    # the same comparison Decode's own replay computes, whatever it is (a wiring, or the target's own
    # hidden against the draft's output where every engine feeds the declared wiring)
    st.session_state["decode_reference_task"] = tasks.start_reference(state.db(), run.id, reference)
