"""The train-vs-serve tab: the features serving feeds against those training stored (.ckpt)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from backend.diagnostics.mismatch import TrainServeResult
from backend.service import tasks
from ui import charts, state
from ui.html import CSS, mismatch_html
from ui.taskview import task_panel
from ui.tokens import Pieces


def _first_mismatch(result: TrainServeResult, pieces: Pieces) -> None:
    first = result.first_mismatch
    if first is None:
        st.success("Serving features equal the training features at every token and chunk.")
        return
    token = result.input_ids[first.position]
    st.error(
        f"First mismatch: {first.chunk} at token {first.position} ({pieces(token)!r}): cosine "
        f"{first.cosine:.3f}, norm ratio {first.norm_ratio:.2f}."
    )


def _render(result: TrainServeResult) -> None:
    pieces = Pieces(result.target)
    _first_mismatch(result, pieces)
    st.caption(
        "Tokens of the feature file: red where a chunk mismatches (hover for each chunk's cosine and norm ratio)"
    )
    st.html(CSS + mismatch_html(result.input_ids, result.rows, pieces))
    st.markdown(
        f"Serving feeds HF **{result.serving_aux_hf_indices}**; the stored training chunks equal HF "
        f"**{result.training_aux_hf_indices}** (None = no layer matches)."
    )
    if result.fix:
        st.markdown(f"**Fix:** {result.fix}")
    matches = [m.to_dict() for m in result.training_chunk_matches]
    st.dataframe(pd.DataFrame(matches), hide_index=True, key="diff_matches")
    st.dataframe(pd.DataFrame([s.to_dict() for s in result.summary]), hide_index=True, key="diff_summary")
    auto = st.toggle("Auto colour range", key="diff_auto", help="Off: the scales are fixed by meaning.")
    left, right = st.columns(2)
    for column, value, title, key in (
        (left, "cosine", "cosine (serve vs train)", "diff_cosine"),
        (right, "norm_ratio", "norm ratio |serve| / |train|", "diff_ratio"),
    ):
        column.plotly_chart(
            charts.heatmap(result.rows, value, title, result.chunk_names, auto_range=auto), key=key
        )
    st.caption("; ".join(f"{k}: {v}" for k, v in result.definitions.items()))


def diff_tab() -> None:
    st.markdown(
        "Compare the features serving feeds with those training stored (SpecForge .ckpt), per token and "
        "per layer chunk; name the first mismatch and find which HF index each training chunk really is. "
        "A DFlash draft's file holds one chunk per target layer it reads (SpecForge and z-lab train DFlash "
        "online; a dump in the same dict is read the same)."
    )
    path = st.text_input("Feature file (.ckpt)", "demo/data/features/data_0.ckpt", key="diff_path")
    if st.button("Diff", key="diff_run"):
        st.session_state["diff_task"] = tasks.start_train_vs_serve(
            state.target_path(), state.draft_path(), path
        )
    task_panel("diff_task", _render, adopt="diff")
