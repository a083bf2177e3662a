"""The Samples page's browser: filters (kept per dataset), the table of matching samples whose rows
open a sample, the picker that follows a click, and the sample with its prompt/response boundary,
loss mask and (for a feature file) the hidden-state tensors it holds."""

from __future__ import annotations

import zlib
from pathlib import PurePath

import pandas as pd
import streamlit as st

from backend import BadInput
from backend.service import datasets as stored_datasets
from ui import state
from ui.html import CSS, md, sample_html
from ui.pickers import samples_of
from ui.tokens import Pieces

# The filters, the table's row selection and the picked sample belong to the dataset: their keys
# carry its id, and they start fresh whenever another dataset (a new import included) is selected.
FILTERS = ("samples_filter_source", "samples_filter_length", "samples_filter_coverage", "samples_filter_text")


@st.cache_data(show_spinner=False, max_entries=8)
def sample_texts(db_url: str, dataset_id: int, target_path: str) -> list[str]:
    decoder = Pieces(target_path)
    return [s.text or decoder.text(s.input_ids) for s in samples_of(db_url, dataset_id)]


@st.cache_data(show_spinner=False, max_entries=8)
def answer_starts(db_url: str, dataset_id: int, target_path: str) -> list[str]:
    """Each sample's answer, from its first token: what tells rows apart (a chat template's prompt
    starts with the same system turn in every row)."""
    decoder = Pieces(target_path)
    return [
        " ".join(decoder.text(s.input_ids[s.prompt_len : s.prompt_len + 48]).split())
        for s in samples_of(db_url, dataset_id)
    ]


def _fresh_filters(dataset_id: int) -> None:
    if st.session_state.get("samples_filters_of") != dataset_id:
        for prefix in FILTERS:
            st.session_state.pop(f"{prefix}_{dataset_id}", None)
        st.session_state.pop(f"samples_pick_{dataset_id}", None)
        st.session_state.pop("samples_clicked", None)
        st.session_state["samples_filters_of"] = dataset_id


def _visible(samples: list, texts: list[str], dataset_id: int) -> list[int]:
    """The filters' widgets; the indices of the samples that match them."""
    sources = sorted({s.source for s in samples})
    col1, col2, col3, col4 = st.columns(4)
    picked_sources = col1.multiselect(
        "Sources (empty = all)",
        sources,
        key=f"samples_filter_source_{dataset_id}",
        placeholder="All sources",
        help="Leave empty to see every source; pick some to see only those.",
    )
    shortest, longest = min(s.seq_len for s in samples), max(s.seq_len for s in samples)
    if shortest < longest:
        length_range = col2.slider(
            "Length (tokens)",
            shortest,
            longest,
            (shortest, longest),
            key=f"samples_filter_length_{dataset_id}",
        )
    else:
        length_range = (shortest, longest)
        col2.caption(f"Length: every sample has {shortest} tokens.")
    coverage = col3.slider(
        "Loss-mask coverage", 0.0, 1.0, (0.0, 1.0), step=0.05, key=f"samples_filter_coverage_{dataset_id}"
    )
    query = col4.text_input("Search text", key=f"samples_filter_text_{dataset_id}")
    return [
        i
        for i, s in enumerate(samples)
        if (not picked_sources or s.source in picked_sources)
        and length_range[0] <= s.seq_len <= length_range[1]
        and coverage[0] - 1e-9 <= s.loss_coverage <= coverage[1] + 1e-9
        and (not query or query.lower() in texts[i].lower())
    ]


def _table(samples: list, answers: list[str], visible: list[int], dataset_id: int) -> str:
    """The matching samples; a click on a row (or any of its cells) picks that sample. Its key."""
    table = pd.DataFrame(
        [
            {
                "#": i,
                "source": samples[i].source,
                "line": samples[i].line,
                "tokens": samples[i].seq_len,
                "prompt": samples[i].prompt_len,
                "loss-mask coverage": round(samples[i].loss_coverage, 3),
                "answer starts": answers[i][:120],
            }
            for i in visible
        ]
    )
    # One table key per set of rows: a selection made in one filtered table never points at another's row.
    table_key = f"samples_table_{dataset_id}_{zlib.crc32(repr(visible).encode()):08x}"
    event = st.dataframe(
        table,
        hide_index=True,
        key=table_key,
        height=min(260, 35 * (len(visible) + 1) + 3),
        on_select="rerun",
        selection_mode=["single-row", "single-cell"],  # a click on any cell of a row opens it too
    )
    selection = event.selection if event is not None else {}
    rows = [r for r in selection.get("rows", []) if r < len(visible)]
    cells = [c[0] for c in selection.get("cells", []) if c[0] < len(visible)]
    last = st.session_state.get("samples_clicked") or (None, [], [])
    if last[0] != table_key:
        last = (table_key, [], [])
    clicked = (
        cells[0] if cells and cells != last[2] else rows[0] if rows and rows != last[1] else None
    )  # the newest click, on a cell or on a row's box
    if clicked is not None:
        st.session_state[f"samples_pick_{dataset_id}"] = visible[clicked]  # a click wins over the picker
    st.session_state["samples_clicked"] = (table_key, rows, cells)
    return table_key


def _pick(samples: list, visible: list[int], dataset_id: int, table_key: str) -> int:
    pick = f"samples_pick_{dataset_id}"

    def follow_picker() -> None:
        """The picker moved: the table marks the picked row (read back as a click on that same row)."""
        picked = st.session_state.get(pick)
        if picked in visible:
            st.session_state[table_key] = {
                "selection": {"rows": [visible.index(picked)], "columns": [], "cells": []}
            }

    if st.session_state.get(pick) not in visible:  # filtered out: the picker starts at the first match
        st.session_state.pop(pick, None)
    return st.selectbox(
        "Sample",
        visible,
        key=pick,
        format_func=lambda i: f"#{i} · {samples[i].source} · {samples[i].seq_len} tokens",
        on_change=follow_picker,
    )


def _feature_tensors(sample, dataset) -> None:
    feature_file = sample.feature_file
    if not (feature_file or dataset.format == "specforge"):
        return
    try:
        tensors = stored_datasets.feature_tensors(feature_file)
    except BadInput as error:
        st.caption(f"Hidden states: {md(error)}")
        return
    st.markdown(
        f"**Hidden states in this sample's feature file** ({md(PurePath(feature_file).name)}), "
        "what the draft was trained on:"
    )
    st.dataframe(pd.DataFrame(tensors), hide_index=True, key="samples_feature_tensors")


def _show_sample(samples: list, index: int, dataset) -> None:
    sample = samples[index]
    st.session_state["samples_selected"] = sample.id
    st.markdown(
        f"**Sample #{index}** (line {sample.line}, source {md(sample.source)}): {sample.prompt_len} prompt "
        f"tokens, {sample.seq_len - sample.prompt_len} after them, loss mask on {sum(sample.loss_mask)} tokens. "
        "Grey = prompt, green = response, underline = loss_mask 1; hover a token for its id and piece."
    )
    pieces = Pieces(state.target_path())
    st.html(
        CSS
        + sample_html(sample.input_ids, sample.loss_mask, sample.prompt_len, pieces.many(sample.input_ids))
    )
    _feature_tensors(sample, dataset)
    if st.button("Open in Decode", key="samples_open_decode"):
        st.session_state["decode_sample"] = (dataset.id, index)
        st.switch_page("pages/2_Decode.py")


def browse(dataset) -> None:
    samples = samples_of(state.db(), dataset.id)
    _fresh_filters(dataset.id)
    texts = sample_texts(state.db(), dataset.id, state.target_path())
    visible = _visible(samples, texts, dataset.id)
    if not visible:
        st.caption(f"0 of {len(samples)} samples match: widen the filters or clear the search.")
        return
    st.caption(f"{len(visible)} of {len(samples)} samples match. Click a row to open that sample below.")
    table_key = _table(
        samples, answer_starts(state.db(), dataset.id, state.target_path()), visible, dataset.id
    )
    _show_sample(samples, _pick(samples, visible, dataset.id, table_key), dataset)
