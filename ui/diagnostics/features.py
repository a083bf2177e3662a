"""The served-features section of the server tab: SGLang's returned hidden states (saved /generate
responses with return_hidden_states) against the target's layers, slot by slot (serve-check --features)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from backend import BadInput
from backend.service import tasks
from backend.service.feature_check import DEFINITION, FeatureCheck, parse_responses, read_responses
from ui import state
from ui.html import md
from ui.taskview import task_panel

KEY = "features_task"
INTRO = (
    "**Features the server fed the draft.** Start SGLang with `--enable-return-hidden-states`, send `/generate` "
    "with `return_hidden_states: true`, and save the responses (JSON list or JSONL, each with the request's "
    "`input_ids` beside it). Under EAGLE-3 `meta_info.hidden_states` holds the concatenated aux states; each slot "
    "is held against the target's layers (the CLI: `serve-check --features --responses FILE`)."
)


def _render(result: FeatureCheck) -> None:
    (st.success if result.fed_as_trained else st.error)(md(result.verdict))
    trained = result.trained_hf
    rows = [
        {
            "slot": s.slot,
            "fed (HF index)": "none" if s.best is None else s.best,
            "trained (HF index)": trained[s.slot] if s.slot < len(trained) else None,
            "cosine": f"{s.cosine:.4f}",
            "norm ratio": f"{s.norm_ratio:.3f}",
            "runner-up": f"HF {s.runner_up.hf_index} ({s.runner_up.cosine:.4f})" if s.runner_up else "",
        }
        for s in result.slots
    ]
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="features_slots")
    st.caption(
        f"SGLang reads this draft's config as HF {result.sglang_reads_hf}; trained on HF {trained}. "
        + md(DEFINITION)
    )
    if result.note:
        st.warning(md(result.note))
    st.dataframe(
        pd.DataFrame(
            [
                {"response": r.response, "layout": r.layout, "rows compared": r.rows_compared}
                for r in result.requests
            ]
        ),
        hide_index=True,
        key="features_requests",
    )


def features_section() -> None:
    st.markdown(INTRO)
    upload = st.file_uploader("Saved responses", type=["json", "jsonl"], key="features_upload")
    location = st.text_input("...or a file path", "", key="features_path")
    if st.button("Compare the served features", key="features_run"):
        try:
            if location.strip():
                responses, source = read_responses(location.strip()), location.strip()
            elif upload is not None:
                try:
                    text = upload.getvalue().decode("utf-8")
                except UnicodeDecodeError:
                    raise BadInput(f"{upload.name}: not UTF-8 text") from None
                responses, source = parse_responses(text, upload.name), upload.name
            else:
                raise BadInput("upload the saved responses or give their path")
            st.session_state.pop("features_error", None)
            st.session_state[KEY] = tasks.feature_check_job.start(
                state.target_path(), state.draft_path(), responses, source
            )
        except BadInput as error:
            st.session_state["features_error"] = str(error)
    if st.session_state.get("features_error"):
        st.error(st.session_state["features_error"])
    task_panel(KEY, _render, failure="The comparison failed: ", adopt="features")
