"""The Decode page's start form: its widgets read into one ReplayRequest (validated there, once)."""

from __future__ import annotations

import streamlit as st

from backend import BadInput
from backend.run.request import ReplayRequest, settings_of
from backend.service import checkpoints
from ui import state
from ui.html import md
from ui.numbers import setting_value, setting_widget
from ui.pickers import dataset_picker, sample_preview

ROW_COLUMNS = 5  # every row of settings in five equal columns (the main row: the draft, then four)
TREE_HELP = (
    "Tree and sampling, as SGLang's flags: topk > 1 drafts a tree of N verified tokens "
    "(--speculative-eagle-topk, --speculative-num-draft-tokens; N = 0 means K + 1, a chain); "
    "temperature 0 is greedy. docs/reference.md §12. Target's side: step runs the target at every verify "
    "step; trace runs it once per sample and then the draft alone (greedy only; docs/traces.md)."
)


def _prompt_source() -> dict | str | None:
    """The request's prompt fields: a dataset sample's ids as they are, or typed text; a line saying
    why not when the sample number is out of range (None: no dataset)."""
    mode = st.radio("Prompt from", ["Dataset sample", "Typed prompt"], horizontal=True, key="decode_mode")
    if mode == "Typed prompt":
        typed = st.text_area("Prompt", "def parse_header(line):\n", key="decode_prompt")
        templated = st.checkbox(
            "Apply the target's chat template",
            value=checkpoints.has_chat_template(state.target_path()),
            key="decode_chat_template",
            help="Send the prompt as one user message behind the target's chat template, with the "
            "assistant's header after it, as a chat server does. Off: the text is tokenized raw (a base "
            "model, or to see what a raw prompt does to a chat-trained draft).",
        )
        return {"prompt_text": typed, "sample_ref": "prompt", "chat_template": templated}
    preset = st.session_state.get("decode_sample")
    dataset_id, samples = dataset_picker("decode_dataset", preset[0] if preset else None)
    if not samples:
        return None
    # No min/max on the widget, as for the settings below: out of range, the browser would keep the
    # last good number and Start would replay that sample, while the field shows the typed one.
    index = st.number_input(
        "Sample #",
        value=preset[1] if preset and preset[0] == dataset_id else 0,
        step=1,
        key="decode_index",
        help=f"0 to {len(samples) - 1}",
    )
    if not 0 <= int(index) < len(samples):
        said = f"Sample #{int(index)}: this dataset has samples 0 to {len(samples) - 1}"
        st.error(said)
        return said
    chosen = samples[int(index)]
    sample_preview(chosen, state.target_path())
    return {
        "prompt_ids": tuple(chosen.prompt_ids),
        "sample_id": chosen.id,
        "sample_ref": f"dataset {dataset_id} #{int(index)}",
    }


def _row(row: str) -> list:
    found = [(n, m, d) for n, m, d in settings_of() if m.widget is not None and m.widget.row == row]
    assert len(found) <= ROW_COLUMNS - (row == "main"), f"the Decode form's {row} row holds {ROW_COLUMNS}"
    return found


def _widgets(row: str, columns) -> dict:
    """The widgets of one row of the form, one column each, in the request's field order."""
    return {
        name: (meta, setting_widget(column, meta, default, f"decode_{name}"))
        for column, (name, meta, default) in zip(columns, _row(row), strict=False)
    }


def _follow_sidebar(names: list[str], current: str) -> None:
    """ "Draft to replay" starts on the sidebar's active draft and follows it when the sidebar changes
    (rather than staying on the old draft); a draft picked in the form stays until then. The
    widget's value is set through its key before it is drawn, the one way that also moves what the
    browser shows (dropping the key and passing an index left the browser's old choice on screen)."""
    seen = st.session_state.get("decode_draft_sidebar")
    st.session_state["decode_draft_sidebar"] = current
    if seen != current or st.session_state.get("decode_draft") not in names:
        st.session_state["decode_draft"] = current if current in names else names[0]


def replay_request(expanded: bool) -> ReplayRequest | None:
    """The form (open when `expanded`); the request when Start is clicked and the widgets make a valid
    one (else None, with the reason on screen). The settings' widgets are built from the request's
    fields: a setting declared there appears here."""
    with st.expander("Start a replay", expanded=expanded):
        source = _prompt_source()
        names = list(state.drafts())
        current = state.draft_name(state.draft_path())
        columns = st.columns(ROW_COLUMNS)
        _follow_sidebar(names, current)
        draft_choice = columns[0].selectbox(
            "Draft to replay",
            names,
            key="decode_draft",
            help="The draft this replay runs. It starts on the sidebar's active draft; choosing another "
            "here changes this replay only.",
        )
        held = _widgets("main", columns[1:])
        st.caption(TREE_HELP)
        held |= _widgets("tree", st.columns(ROW_COLUMNS))
        held |= _widgets("sampling", st.columns(ROW_COLUMNS))
        if not st.button("Start", type="primary", key="decode_start"):
            return None
        try:
            settings = {name: setting_value(meta, value) for name, (meta, value) in held.items()}
            if source is None:
                raise BadInput("choose a sample or type a prompt")
            if isinstance(source, str):
                raise BadInput(source)
            request = ReplayRequest(state.target_path(), state.drafts()[draft_choice], **settings, **source)
            checkpoints.checked_override(
                request.target, request.aux_hf_indices
            )  # its one check, before Start
            return request
        except BadInput as error:
            st.error(md(str(error)))
            return None
