"""The Diagnostics page's verdict: `diagnose` on samples first, the cheap checks below it."""

from __future__ import annotations

import streamlit as st

from backend.service import checks, tasks
from ui import state
from ui.diagnosis import diagnose_form, show_diagnosis
from ui.diagnostics.common import feature_path, stale_note
from ui.taskview import task_panel
from ui.verdict import show_verdict

INTRO = (
    "Why is this draft accepted less than it should be? One verdict over every failure class users report "
    "(aux wiring, variant flags, vocab mapping, RoPE and context, position offset, chat template, repetition, "
    "serving flags, precision, train-vs-serve gap): the same object as `python -m backend diagnose --json`. "
    "With samples the wiring and reading probes, the template check and live replays run."
)
FEATURES_HELP = (
    "A SpecForge feature file from the run that trained the active draft (the bundled miswired draft's "
    "are demo/data/features/data_0.ckpt). With it the verdict compares what serving feeds with what "
    "training fed; without it only the probe can see the wiring."
)


def diagnose_section() -> None:
    st.subheader("Verdict")
    st.caption(INTRO)
    asked = diagnose_form()
    if asked is not None:
        samples, options = asked
        st.session_state["diagnose_task"] = tasks.start_diagnose(
            state.target_path(), state.draft_path(), samples, options
        )
    task_panel(
        "diagnose_task",
        lambda result: show_diagnosis(result, stale_note(result)),
        on_finish=_keep_probe,
        adopt="diagnose",
    )


def _keep_probe(result: dict) -> None:
    """Diagnose's wiring probe, kept for the probe tab and the lint (issue 43 row 4)."""
    if result.get("probe"):
        checks.remember_probe(result["target"], result["draft"], result["probe"], state.db())


def cheap_checks() -> None:
    with st.expander(
        "Cheap checks only (no samples): preflight, the lint of the draft's own config, train-vs-serve"
    ):
        st.text_input(
            "Training feature file of this draft (optional .ckpt)",
            "",
            key="verdict_features",
            help=FEATURES_HELP,
        )
        if st.button("Run the cheap checks", key="verdict_run"):
            st.session_state["verdict_task"] = tasks.start_signals(
                state.target_path(), state.draft_path(), feature_path()
            )

        def render(signals: dict) -> None:
            show_verdict(
                checks.verdict(signals, signals["target"], signals["draft"], state.db()), stale_note(signals)
            )

        task_panel("verdict_task", render, adopt="signals")
