"""The Samples page's import: a path on this machine or an upload, in any supported format, with a
report that keeps the good records and lists each bad one with its record number and reason."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from backend import BadInput
from backend.service import datasets as stored_datasets
from ui import state
from ui.html import md
from ui.numbers import plural


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
        st.session_state["samples_import_report"] = str(error)
        return
    st.session_state["samples_import_report"] = (dataset_id, result)
    st.session_state["samples_dataset"] = dataset_id
    st.session_state["samples_dataset_select"] = dataset_id  # show the new dataset (the widget comes later)


def import_section() -> None:
    """Import by path or upload; the report (good records kept, bad ones listed) stays on screen."""
    with st.expander("Import a dataset", expanded=False):
        st.caption(
            "Formats: training JSONL (input_ids, loss_mask, seq_len, n_prompt_tokens, n_response_tokens, source); "
            "ShareGPT JSON/JSONL (rendered with the target's chat template); SpecForge .ckpt feature files "
            "(a file or a folder); prompts as raw text (.txt, one per line, or JSONL records with a prompt, text, "
            "question or instruction field and an optional completion, response, output or answer). Every record "
            "is validated: good ones are kept, bad ones are listed with their line and reason; a file whose "
            "samples a dataset already holds adds nothing."
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
            if st.button("Import", key="samples_import_path"):
                if path.strip():
                    do_import(path.strip(), name, format_choice)
                else:
                    st.session_state["samples_import_report"] = "type the path of a file or folder first"
        else:
            upload = st.file_uploader("File", key="samples_upload", type=["jsonl", "json", "txt", "ckpt"])
            if st.button("Import upload", key="samples_import_upload"):
                if upload is not None:
                    do_import(
                        None, name or upload.name, format_choice, upload=(upload.name, upload.getvalue())
                    )
                else:
                    st.session_state["samples_import_report"] = "choose a file to upload first"
        _report(st.session_state.get("samples_import_report"))


def _report(report) -> None:
    """The last import's outcome: its error, or the dataset made with the records kept and each one refused."""
    if isinstance(report, str):
        st.error(f"Nothing imported: {md(report)}")
    elif report is not None:
        dataset_id, result = report
        rejected = result.rejected
        if result.already is not None:
            st.info(
                f"Dataset {dataset_id} already holds these samples (the same {result.format} records): nothing "
                "added. Pick it in the dataset list; delete it first to import the file again."
            )
            return
        (st.warning if rejected else st.success)(
            f"Dataset {dataset_id}: imported {plural(result.imported, 'sample')} (format: {result.format}), "
            f"rejected {len(rejected)}"
            + (" (each listed below with its record number and reason)." if rejected else ".")
        )
        if rejected:
            frame = pd.DataFrame([{"line": r.line, "reason": r.reason} for r in rejected])
            st.dataframe(frame, hide_index=True, key="samples_rejected")
