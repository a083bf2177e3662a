"""The "Served by vLLM" tab: vLLM serves the active pair (launched here, or at a URL), each prompt is
replayed under the vLLM reading, and the per-step accepted counts are compared (engine_check)."""

from __future__ import annotations

import html

import pandas as pd
import streamlit as st

from backend.service import tasks
from backend.service.engine_check import DEFINITION, EngineCheckSettings
from backend.service.vllm_server import DEFAULT_PYTHON
from ui import state
from ui.pickers import first_samples
from ui.taskview import task_panel

INTRO = (
    "Hold the replay against the real engine. vLLM's CPU build serves the active pair (SpecLens starts it on "
    "127.0.0.1 and stops it after, about a minute to start), or give the URL of a vLLM OpenAI server started "
    "with `--per-request-spec-decode-metrics detailed`. Each prompt is sent as token ids (greedy) and replayed "
    "offline under the chosen reading of vLLM; the table says per prompt whether the accepted counts are "
    "equal step for step, or where they first differ."
)
READINGS = {
    "vllm": "vLLM 0.32, V1 runner (the CPU build)",
    "vllm-v2": "vLLM 0.32, V2 runner (the GPU default)",
}


def _render(result: dict) -> None:
    equal = result["equal_prompts"] == result["prompts"]
    (st.success if equal else st.warning)(result["headline"])
    launched = result.get("launched") or {}
    if launched.get("aux_layers_line"):
        st.caption(
            "vLLM's log: "
            + html.escape(launched["aux_layers_line"].split("]")[-1].strip())
            + f" · ready in {launched['seconds_to_ready']:.0f} s"
        )
    st.caption(
        f"Replayed as {READINGS.get(result['reading'], result['reading'])} with HF {result['wiring']}."
    )
    rows = []
    for r in result["rows"]:
        d = r["first_difference"]
        rows.append(
            {
                "prompt": r["prompt"],
                "vLLM accept length": r["served_accept_length"],
                "replay accept length": r["replay_accept_length"],
                "steps (vLLM / replay)": f"{r['served_steps']} / {r['replay_steps']}",
                "per-step counts": "equal step for step"
                if d is None
                else f"differ from step {d['step']} (vLLM {d['served']}, replay {d['replay']})",
                "same tokens": r["same_tokens"],
                "replay run": r["replay_run"],
            }
        )
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="vllm_check_table")
    if result.get("explained_by"):
        e = result["explained_by"]
        st.info(f"vLLM ran HF {e['aux_hf_indices']} ({e['why']}): a replay with that wiring reproduces it.")
    st.caption(
        f"{DEFINITION}. Kept in {result['folder']} (responses.jsonl is readable by observe --requests)."
    )


def vllm_tab() -> None:
    st.markdown(INTRO)
    samples = first_samples("vllm_check", default_n=4)
    c1, c2, c3 = st.columns(3)
    where = c1.radio("vLLM", ["Launch it here", "At a URL"], horizontal=True, key="vllm_check_where")
    steps = int(c2.number_input("K (num_speculative_tokens)", 1, 8, 4, key="vllm_check_steps"))
    tokens = int(c3.number_input("Max new tokens", 8, 512, 96, key="vllm_check_tokens"))
    url = None
    if where == "At a URL":
        url = st.text_input("Server URL", "http://127.0.0.1:8000", key="vllm_check_url").strip()
    elif not DEFAULT_PYTHON.is_file():
        st.info(f"No vLLM here yet ({DEFAULT_PYTHON}): the README's vLLM command installs its CPU build.")
    reading = st.selectbox("Replay as", list(READINGS), format_func=READINGS.get, key="vllm_check_reading")
    if st.button("Check against vLLM", key="vllm_check_run") and samples:
        settings = EngineCheckSettings(state.target_path(), state.draft_path(), steps, tokens, reading)
        st.session_state["vllm_check_task"] = tasks.vllm_check_job.start(state.db(), settings, samples, url)
    task_panel("vllm_check_task", _render, adopt="vllm-check")
