"""The accuracy-vs-live tab: teacher-forced accuracy (what training reports) beside live acceptance."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from backend import BadInput
from backend.run.wiring import parse_aux_indices
from backend.service import kept_results, tasks
from ui import charts, state
from ui.html import md
from ui.numbers import setting_number
from ui.pickers import first_samples
from ui.taskview import task_panel

PROBE_HINT = (
    "This check takes the draft's declared wiring as true. It cannot tell which target layers the draft "
    "was trained on: a draft declared with the wrong layers passes it. The Wiring probe tab checks that."
)


def _summary(summary, rows: list) -> None:
    cells = st.columns(4)
    cells[0].metric("Mean teacher acc_0", f"{summary.mean_acc_0:.3f}")
    cells[1].metric("Mean predicted accept length", f"{summary.mean_predicted:.2f}")
    cells[2].metric("Mean live accept length", f"{summary.mean_live:.2f}")
    cells[3].metric("Live / predicted", f"{summary.live_over_predicted:.2f}")
    if summary.flagged:
        st.error(
            f"This draft's live accept length is far below what its teacher accuracy predicts "
            f"(mean live < {summary.flag_ratio} x mean predicted): served, it does not see what it "
            "was trained on. Check the wiring (Wiring probe tab) and the vocab mapping (doctor)."
        )
    st.plotly_chart(charts.predicted_vs_live(rows, summary.flag_ratio), key="agreement_scatter")


def _render(result) -> None:
    """`result`: the agreement job's Agreement (backend/diagnostics/agreement.py)."""
    frame = pd.DataFrame([row.to_dict() for row in result.rows]).drop(columns=["acc_per_step"])
    if result.summary.samples:
        _summary(result.summary, result.rows)
    st.dataframe(frame, hide_index=True, key="agreement_table")
    flagged = int(frame["flagged"].sum())
    (st.warning if flagged else st.info)(f"{flagged} of {len(frame)} samples flagged. {result.definition}.")
    if not flagged:
        st.info(
            "Without a claimed training wiring, teacher-forced and live acceptance both use the declared "
            "wiring, so a wrong declaration shows in neither. " + PROBE_HINT
        )


def agreement_tab() -> None:
    st.markdown("Teacher-forced accuracy (what training reports) next to live accept length, per sample.")
    samples = first_samples("agreement", default_n=6)
    c1, c2, c3 = st.columns(3)
    steps = setting_number(c1, "num_steps", "agreement_steps")
    max_new = setting_number(c2, "max_new_tokens", "agreement_max_new")
    found = kept_results.trained_wiring(state.target_path(), state.draft_path(), state.db())
    filled = ", ".join(map(str, found or []))
    claimed = c3.text_input(  # keyed by the draft and the kept probe's answer: a new answer fills it anew
        "Training wiring (HF indices, optional)",
        filled,
        key=f"agreement_training_wiring_{abs(hash((state.draft_path(), filled)))}",
        help="The wiring the training run fed (e.g. the probe's answer). Empty: the serving wiring.",
    )
    if found:
        st.caption(
            f"Training wiring filled from the kept wiring probe, which rejected the declared wiring: the draft "
            f"was trained on HF {found}. Teacher-forced accuracy is measured on what training fed, live "
            "acceptance on what serving feeds (the declared wiring): the gap between them is the cost of the "
            "miswiring. Empty the field to measure both on the declared wiring."
        )
    ready = bool(samples) and None not in (steps, max_new)
    if st.button("Measure", key="agreement_run", disabled=not ready):
        try:
            training = parse_aux_indices(claimed)
        except BadInput as error:
            st.error(f"Training wiring: {md(error)}")
        else:
            st.session_state["agreement_task"] = tasks.start_agreement(
                state.target_path(), state.draft_path(), samples, steps, max_new, training
            )
    task_panel("agreement_task", _render, adopt="agreement")
