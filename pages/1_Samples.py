"""Samples: registered datasets, import (path or upload), filters, and the sample view."""

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

st.set_page_config(page_title="SpecLens · Samples", layout="wide")
state.sidebar()
st.title("Samples")


def do_import(
    path: str | None, name: str, format_choice: str, upload: tuple[str, bytes] | None = None
) -> None:
    format = None if format_choice == "detect" else format_choice
    try:
        with st.spinner(f"Importing {upload[0] if upload is not None else path}: validating every record..."):
            if upload is not None:
                dataset_id, result = stored_datasets.import_upload(
                    state.db(), upload[0], upload[1], name or None, state.target_path(), format
                )
            else:
                dataset_id, result = stored_datasets.import_dataset(
                    state.db(), path, name or None, state.target_path(), format
                )
    except BadInput as error:
        st.session_state["samples_import_report"] = {"error": str(error)}
        return
    st.session_state["samples_import_report"] = {
        "dataset_id": dataset_id,
        "imported": result.imported,
        "format": result.format,
        "rejected": [{"line": r.line, "reason": r.reason} for r in result.rejected],
    }
    st.session_state["samples_dataset"] = dataset_id
    st.session_state["samples_dataset_select"] = dataset_id  # show the new dataset (the widget comes later)


with st.expander("Import a dataset", expanded=False):
    st.caption(
        "Formats: training JSONL (input_ids, loss_mask, seq_len, n_prompt_tokens, n_response_tokens, source); "
        "ShareGPT JSON/JSONL (rendered with the target's chat template); SpecForge .ckpt feature files "
        "(a file or a folder); plain-text prompts (.txt, one per line). Every record is validated: good ones "
        "are kept, bad ones are listed with their line and reason."
    )
    source_kind = st.radio(
        "Source", ["Path on this machine", "Upload"], horizontal=True, key="samples_source"
    )
    name = st.text_input("Dataset name (optional)", key="samples_name")
    format_choice = st.selectbox(
        "Format", ["detect", "jsonl", "sharegpt", "specforge", "prompts"], key="samples_format"
    )
    if source_kind == "Path on this machine":
        path = st.text_input("File or folder path", key="samples_path")
        if st.button("Import", key="samples_import_path") and path:
            do_import(path, name, format_choice)
    else:
        upload = st.file_uploader("File", key="samples_upload", type=["jsonl", "json", "txt", "ckpt"])
        if st.button("Import upload", key="samples_import_upload") and upload is not None:
            do_import(None, name or upload.name, format_choice, upload=(upload.name, upload.getvalue()))
    report = st.session_state.get("samples_import_report")
    if report:
        if "error" in report:
            st.error(f"Nothing imported: {md(report['error'])}")
        else:
            (st.warning if report["rejected"] else st.success)(
                f"Dataset {report['dataset_id']}: imported {report['imported']} {report['format']} samples, "
                f"rejected {len(report['rejected'])}"
                + (" (each listed below with its record number and reason)." if report["rejected"] else ".")
            )
            if report["rejected"]:
                st.dataframe(pd.DataFrame(report["rejected"]), hide_index=True, key="samples_rejected")

datasets = stored_datasets.list_datasets(state.db())
if not datasets:
    st.info("No dataset yet: import one above.")
    st.stop()

st.subheader("Datasets")
st.dataframe(
    pd.DataFrame(
        [
            {
                "id": d.id,
                "name": d.name,
                "format": d.format,
                "samples": d.sample_count,
                "origin": (
                    f"uploaded as {uploaded}"
                    if (uploaded := stored_datasets.uploaded_as(state.db(), d.path))
                    else "imported by path"
                ),
                "path": d.path,
            }
            for d in datasets
        ]
    ),
    hide_index=True,
    key="samples_datasets",
)
ids = [d.id for d in datasets]
if st.session_state.get("samples_dataset_select") not in ids:  # first visit, or its dataset was deleted
    chosen = st.session_state.get("samples_dataset")
    st.session_state["samples_dataset_select"] = chosen if chosen in ids else ids[0]
dataset_id = st.selectbox(
    "Dataset",
    ids,
    format_func=lambda i: next(f"{d.id}: {d.name}" for d in datasets if d.id == i),
    key="samples_dataset_select",
)
st.session_state["samples_dataset"] = dataset_id
dataset = next(d for d in datasets if d.id == dataset_id)
uploaded = stored_datasets.uploaded_as(state.db(), dataset.path)
if uploaded:
    st.caption(f"Uploaded as {md(uploaded)}; the file is kept at {md(dataset.path)}.")
elif dataset.path:
    st.caption(f"Imported from {md(dataset.path)}.")
with st.expander("Delete this dataset"):
    st.caption("Its samples go; runs keep their prompts. An uploaded file kept for it is removed too.")
    if st.button(f"Delete dataset {dataset_id}", key="samples_delete"):
        stored_datasets.delete_dataset(state.db(), dataset_id)
        st.session_state.pop("samples_dataset", None)
        st.session_state.pop("samples_dataset_select", None)
        samples_of.clear()
        st.rerun()


samples = samples_of(state.db(), dataset_id)
pieces = Pieces(state.target_path())


@st.cache_data(show_spinner=False, max_entries=8)
def sample_texts(db_url: str, dataset_id: int, target_path: str) -> list[str]:
    decoder = Pieces(target_path)
    return [s.extra.get("text") or decoder.text(s.input_ids) for s in samples_of(db_url, dataset_id)]


# The filters, the table's row selection and the picked sample belong to the dataset: their keys
# carry its id, and they start fresh whenever another dataset (a new import included) is selected.
FILTERS = ("samples_filter_source", "samples_filter_length", "samples_filter_coverage", "samples_filter_text")
PICK = f"samples_pick_{dataset_id}"
if st.session_state.get("samples_filters_of") != dataset_id:
    for prefix in FILTERS:
        st.session_state.pop(f"{prefix}_{dataset_id}", None)
    st.session_state.pop(PICK, None)
    st.session_state.pop("samples_clicked", None)
    st.session_state["samples_filters_of"] = dataset_id

texts = sample_texts(state.db(), dataset_id, state.target_path())
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
visible = [
    i
    for i, s in enumerate(samples)
    if (not picked_sources or s.source in picked_sources)
    and length_range[0] <= s.seq_len <= length_range[1]
    and coverage[0] - 1e-9 <= s.loss_coverage <= coverage[1] + 1e-9
    and (not query or query.lower() in texts[i].lower())
]
if not visible:
    st.caption(f"0 of {len(samples)} samples match: widen the filters or clear the search.")
    st.stop()
st.caption(f"{len(visible)} of {len(samples)} samples match. Click a row to open that sample below.")
table = pd.DataFrame(
    [
        {
            "#": i,
            "source": samples[i].source,
            "line": samples[i].line,
            "tokens": samples[i].seq_len,
            "prompt": samples[i].prompt_len,
            "loss-mask coverage": round(samples[i].loss_coverage, 3),
            "text": texts[i][:120],
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
    st.session_state[PICK] = visible[clicked]  # a click wins over the picker below
st.session_state["samples_clicked"] = (table_key, rows, cells)


def follow_picker() -> None:
    """The picker moved: the table marks the picked row (read back as a click on that same row)."""
    picked = st.session_state.get(PICK)
    if picked in visible:
        st.session_state[table_key] = {
            "selection": {"rows": [visible.index(picked)], "columns": [], "cells": []}
        }


if st.session_state.get(PICK) not in visible:  # filtered out: the picker starts at the first match
    st.session_state.pop(PICK, None)
index = st.selectbox(
    "Sample",
    visible,
    key=PICK,
    format_func=lambda i: f"#{i} · {samples[i].source} · {samples[i].seq_len} tokens",
    on_change=follow_picker,
)
sample = samples[index]
st.session_state["samples_selected"] = sample.id
st.markdown(
    f"**Sample #{index}** (line {sample.line}, source {md(sample.source)}): {sample.prompt_len} prompt tokens, "
    f"{sample.seq_len - sample.prompt_len} after them, loss mask on {sum(sample.loss_mask)} tokens. "
    "Grey = prompt, green = response, underline = loss_mask 1; hover a token for its id and piece."
)
st.html(
    CSS + sample_html(sample.input_ids, sample.loss_mask, sample.prompt_len, pieces.many(sample.input_ids))
)
feature_file = sample.extra.get("feature_file")
if feature_file or dataset.format == "specforge":
    try:
        tensors = stored_datasets.feature_tensors(feature_file)
    except BadInput as error:
        st.caption(f"Hidden states: {md(error)}")
    else:
        st.markdown(
            f"**Hidden states in this sample's feature file** ({md(PurePath(feature_file).name)}), "
            "what the draft was trained on:"
        )
        st.dataframe(pd.DataFrame(tensors), hide_index=True, key="samples_feature_tensors")
if st.button("Open in Decode", key="samples_open_decode"):
    st.session_state["decode_sample"] = (dataset_id, index)
    st.switch_page("pages/2_Decode.py")
