"""The Decode page's start form: its widgets read into one ReplayRequest (validated there, once)."""

from __future__ import annotations

import streamlit as st

from backend import BadInput
from backend.engine.wiring import parse_aux_indices
from backend.service import checks
from backend.service.requests import ENGINE_CHOICES, ReplayRequest
from ui import state
from ui.pickers import dataset_picker, sample_preview

ENGINE_HELP = (
    "Whose reading of the draft to replay: which layers feed it, which variant flags count, whose "
    "embedding it uses. auto = the tool that trained it. See 'How engines read this draft' below a run."
)
TREE_HELP = (
    "Tree and sampling, as SGLang's flags: topk > 1 drafts a tree of N verified tokens "
    "(--speculative-eagle-topk, --speculative-num-draft-tokens; N = 0 means K + 1, a chain); "
    "temperature 0 is greedy. docs/reference.md §12."
)


def _prompt_source() -> dict | None:
    """The request's prompt fields: a dataset sample's ids as they are, or typed text."""
    mode = st.radio("Prompt from", ["Dataset sample", "Typed prompt"], horizontal=True, key="decode_mode")
    if mode == "Typed prompt":
        typed = st.text_area("Prompt", "def parse_header(line):\n", key="decode_prompt")
        templated = st.checkbox(
            "Apply the target's chat template",
            value=checks.has_chat_template(state.target_path()),
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
    index = st.number_input(
        "Sample #",
        0,
        len(samples) - 1,
        value=preset[1] if preset and preset[0] == dataset_id else 0,
        key="decode_index",
    )
    chosen = samples[int(index)]
    sample_preview(chosen, state.target_path())
    return {
        "prompt_ids": tuple(chosen.prompt_ids),
        "sample_id": chosen.id,
        "sample_ref": f"dataset {dataset_id} #{int(index)}",
    }


def replay_request(expanded: bool) -> ReplayRequest | None:
    """The form (open when `expanded`); the request when Start is clicked and the widgets make a valid one (else None, with
    the reason on screen)."""
    with st.expander("Start a replay", expanded=expanded):
        source = _prompt_source()
        names = list(state.drafts())
        current = state.draft_name(state.draft_path())
        c1, c0, c2, c3, c4 = st.columns(5)
        draft_choice = c1.selectbox(
            "Draft to replay",
            names,
            index=names.index(current) if current in names else 0,
            key="decode_draft",
            help="The draft this replay runs. It starts on the sidebar's active draft; choosing another "
            "here changes this replay only.",
        )
        engine = c0.selectbox("Run it as", ENGINE_CHOICES, key="decode_engine", help=ENGINE_HELP)
        steps = c2.number_input("K (draft steps)", 1, 16, 4, key="decode_steps")
        max_new = c3.number_input("Max new tokens", 1, 4096, 96, key="decode_max_new")
        override_text = c4.text_input(
            "Wiring override (HF indices)",
            "",
            key="decode_override",
            help="Three HF hidden_states indices, e.g. 0,2,4 (0 = embedding output). "
            "Empty: the draft's declared wiring.",
        )
        st.caption(TREE_HELP)
        t1, t2, t3, t4, t5, t6 = st.columns(6)
        topk = t1.number_input("topk", 1, 16, 1, key="decode_topk")
        draft_tokens = t2.number_input("Draft tokens N", 0, 256, 0, key="decode_draft_tokens")
        temperature = t3.number_input("Temperature", 0.0, 10.0, 0.0, step=0.1, key="decode_temperature")
        top_p = t4.number_input("top_p", 0.01, 1.0, 1.0, step=0.05, key="decode_top_p")
        top_k = t5.number_input("top_k (0 = all)", 0, 1_000_000, 0, key="decode_top_k")
        seed = t6.number_input("Seed", 0, 2**31 - 1, 0, key="decode_seed")
        if not st.button("Start", type="primary", key="decode_start"):
            return None
        try:
            if source is None:
                raise BadInput("choose a sample or type a prompt")
            return ReplayRequest(
                state.target_path(),
                state.drafts()[draft_choice],
                num_steps=int(steps),
                max_new_tokens=int(max_new),
                aux_hf_indices=parse_aux_indices(override_text),
                engine=engine,
                topk=int(topk),
                num_draft_tokens=int(draft_tokens) or None,
                temperature=float(temperature),
                top_p=float(top_p),
                top_k=int(top_k),
                seed=int(seed),
                **source,
            )
        except BadInput as error:
            st.error(str(error))
            return None
