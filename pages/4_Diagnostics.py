"""Diagnostics: why a draft that trains well is rejected when served.

One verdict first (`diagnose`, on samples or the cheap checks alone), then a tab each: checkpoint doctor,
wiring probe, train-vs-serve diff, serving-flag lint, training accuracy vs live acceptance, the
speed-up what-if, the server's numbers beside the replay and the replay held against vLLM. Model work runs as background tasks;
the render code lives in ui/diagnostics/."""

from __future__ import annotations

import streamlit as st

from ui import state
from ui.diagnostics import agreement, diff, doctor, lint, probe, served, server, verdict, whatif
from ui.html import CSS, md

st.set_page_config(page_title="SpecLens · Diagnostics", layout="wide")
state.sidebar()
st.title("Diagnostics")
st.caption(f"Target {md(state.target_path())} · draft {md(state.draft_path())} (change them in the sidebar)")

verdict.diagnose_section()

TABS = {
    "Checkpoint doctor": doctor.doctor_tab,
    "Wiring probe": probe.probe_tab,
    "Train vs serve": diff.diff_tab,
    "Serving-flag lint": lint.lint_tab,
    "Accuracy vs live": agreement.agreement_tab,
    "Speed-up what-if": whatif.whatif_tab,
    "Server vs replay": server.server_tab,
    "Served by an engine": served.served_tab,
}
# keyed: a widget in a tab reruns the page, and an unkeyed tab set opened on its first tab again
for tab, render in zip(st.tabs(list(TABS), key="diagnostics_tab"), TABS.values(), strict=True):
    with tab:
        render()
st.html(CSS)
