"""Tables the pages share (no torch)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui.html import md


def engine_readings(readings: dict, key: str) -> None:
    """How each engine reads the draft (backend/engine/readings.py) and where they disagree."""
    rows = [
        {
            "engine": name,
            "aux HF indices": str(view["aux_hf_indices"]),
            "feedback": view["feedback"],
            "embedding": view["embedding"],
            "fc_norm": view["fc_norm"],
            "norm before fc": view["norm_before_fc"],
            "norm before residual": view["norm_before_residual"],
            "norm before lm_head": view["norm_before_lm_head"],
            "vocab mapping": view["vocab_mapping"],
            "loads": "yes" if view["loads"] else f"no: {view['refusal']}",
            "notes": "; ".join(view["notes"]),
        }
        for name, view in readings["engines"].items()
    ]
    st.dataframe(pd.DataFrame(rows), hide_index=True, key=key)
    st.caption(f"The draft was most likely trained as **{readings['training_engine']}** reads it.")
    for finding in readings["disagreements"]:
        st.warning(md(finding["message"]))
    if not readings["disagreements"]:
        st.success("The serving engines and the training reading agree on this draft.")
