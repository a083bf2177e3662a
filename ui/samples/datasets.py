"""The Samples page's datasets: the table of registered datasets, the picker (a new import selected)
and deleting one."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from backend.service import datasets as stored_datasets
from ui import state
from ui.html import md
from ui.pickers import default_dataset, samples_of, tokenizer_warning


def _table(datasets: list) -> None:
    st.subheader("Datasets")
    rows = []
    for d in datasets:
        uploaded = stored_datasets.uploaded_as(state.db(), d.path)
        rows.append(
            {
                "id": d.id,
                "name": d.name,
                "format": d.format,
                "samples": d.sample_count,
                "origin": f"uploaded as {uploaded}" if uploaded else "imported by path",
                "path": d.path,
            }
        )
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="samples_datasets")


def _delete(dataset_id: int) -> None:
    with st.expander("Delete this dataset"):
        st.caption("Its samples go; runs keep their prompts. An uploaded file kept for it is removed too.")
        if st.button(f"Delete dataset {dataset_id}", key="samples_delete"):
            stored_datasets.delete_dataset(state.db(), dataset_id)
            st.session_state.pop("samples_dataset", None)
            st.session_state.pop("samples_dataset_select", None)
            samples_of.clear()
            st.rerun()


def pick_dataset(datasets: list):
    """The table, the picker and the delete button; the chosen dataset."""
    _table(datasets)
    ids = [d.id for d in datasets]
    if st.session_state.get("samples_dataset_select") not in ids:  # first visit, or its dataset was deleted
        chosen = st.session_state.get("samples_dataset")
        st.session_state["samples_dataset_select"] = chosen if chosen in ids else default_dataset(ids)
    names = {d.id: f"{d.id}: {d.name}" for d in datasets}
    dataset_id = st.selectbox("Dataset", ids, format_func=names.get, key="samples_dataset_select")
    st.session_state["samples_dataset"] = dataset_id
    dataset = next(d for d in datasets if d.id == dataset_id)
    uploaded = stored_datasets.uploaded_as(state.db(), dataset.path)
    if uploaded:
        st.caption(f"Uploaded as {md(uploaded)}; the file is kept at {md(dataset.path)}.")
    elif dataset.path:
        st.caption(f"Imported from {md(dataset.path)}.")
    tokenizer_warning(dataset_id)
    _delete(dataset_id)
    return dataset
