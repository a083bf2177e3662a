"""The Diagnostics page's one verdict: `diagnose`, on samples or on the cheap checks alone."""

from __future__ import annotations

import streamlit as st

from backend.service import kept_results, tasks
from ui import state
from ui.diagnosis import diagnose_form, show_diagnosis
from ui.diagnostics.common import stale_note
from ui.taskview import task_panel

INTRO = (
    "Why is this draft accepted less than it should be? One verdict over every failure class users report "
    "(aux wiring, variant flags, vocab mapping, RoPE and context, position offset, chat template, repetition, "
    "serving flags, precision, train-vs-serve gap): the same object as `python -m backend diagnose --json`. "
    "With samples the wiring and reading probes, the template check and live replays run; the cheap checks "
    "alone take seconds."
)


def diagnose_section() -> None:
    st.subheader("Verdict")
    st.caption(INTRO)
    asked = diagnose_form()
    if asked is not None:
        samples, options = asked
        st.session_state["diagnose_task"] = tasks.start_diagnose(
            state.target_path(), state.draft_path(), samples, options, state.db()
        )
    task_panel(
        "diagnose_task",
        lambda result: show_diagnosis(result, stale_note(result)),
        on_finish=_keep,
        adopt="diagnose",
    )
    if "diagnose_task" not in st.session_state:  # a reload, or a new session: the verdict kept
        kept = kept_results.known_verdict(state.target_path(), state.draft_path(), state.db())
        if kept is not None:
            when = kept.kept_at.astimezone().strftime("%Y-%m-%d %H:%M")
            show_diagnosis(
                kept.result,
                f"Kept from {when}: the last verdict reached on this pair (its files unchanged since); "
                "press Diagnose to reach it again.",
            )


def _keep(result) -> None:
    """A finished verdict kept for a reload or a later server, and its wiring probe for the probe tab
    and the lint."""
    kept_results.remember_verdict(result, state.db())
    if result.probe:
        kept_results.remember_probe(result.target, result.draft, result.probe, state.db())
