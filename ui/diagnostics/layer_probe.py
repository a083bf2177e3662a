"""The probe tab for a DFlash draft: its training loss under the declared target layers and their
shifts (backend/diagnostics/dflash_probe.py, what `probe` runs on the CLI), and the field to write."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from backend.service import tasks
from ui import state
from ui.pickers import first_samples
from ui.taskview import task_panel

COLUMNS = {  # header: (format, width in px, definition on hover)
    "loss (nats)": (
        "%.3f",
        90,
        "DFlash's training loss: position-decayed cross-entropy over each anchor's block; ranks",
    ),
    "slot acc": ("%.3f", 75, "teacher-forced top-1 accuracy over the block slots it counts (k >= 1)"),
}


def layer_table(result) -> tuple[pd.DataFrame, dict]:
    """The candidates (DFlashProbeResult.candidates, lowest loss first) and the table's column config."""
    table = pd.DataFrame(
        [
            {
                "target_layer_ids": str(c.target_layer_ids),
                "HF indices": str([i + 1 for i in c.target_layer_ids]),
                "loss (nats)": c.loss,
                "slot acc": c.slot_accuracy,
                "why tried": c.label,
            }
            for c in result.candidates
        ]
    )
    columns = {
        "target_layer_ids": st.column_config.TextColumn(
            "target_layer_ids", width=150, help="dflash_config.target_layer_ids: z-lab ids (HF = id + 1)"
        ),
        "HF indices": st.column_config.TextColumn(
            "HF indices", width=150, help="transformers' hidden_states[i]"
        ),
        **{
            name: st.column_config.NumberColumn(name, format=shown, width=width, help=meaning)
            for name, (shown, width, meaning) in COLUMNS.items()
        },
    }
    return table, columns


def render(result) -> None:
    """`result`: a DFlashProbeResult."""
    shown = st.error if not result.confirmed else st.success if result.separated else st.warning
    shown(result.verdict)
    table, columns = layer_table(result)
    st.dataframe(table, hide_index=True, key="layer_probe_table", column_config=columns)
    st.caption(
        f"{len(result.candidates)} candidates on {result.n_samples} samples (the first {result.anchors} anchors "
        "of each), ranked by the draft's DFlash training loss with the same weights fed each set of layers "
        "(SpecForge's objective: a block after each anchor, exp(-(k-1)/7) weights). The declared layers are "
        "told apart from the best only with 8 samples or more, 3 paired standard errors and a 2% gap."
    )
    if result.fix:
        st.code(f"# the draft's config.json\n{json.dumps(result.fix)}", language="json")
        st.caption("`speclens probe --draft DRAFT --write-fix DIR` writes a copy of the draft with it.")


def layer_probe_tab() -> None:
    st.markdown(
        "Which target layers was this DFlash draft trained on? Its training loss (teacher-forced against the "
        "target) under the declared `dflash_config.target_layer_ids`, each shifted by one, and the other "
        "index conventions."
    )
    samples = first_samples("layer_probe", default_n=8)
    if st.button("Run the layer probe", key="layer_probe_run", disabled=not samples):
        st.session_state["layer_probe_task"] = tasks.start_probe(
            state.target_path(), state.draft_path(), samples, None, 0, 0
        )
    task_panel("layer_probe_task", render)
