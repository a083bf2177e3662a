"""The "Served by an engine" tab: vLLM or llama.cpp serves the active pair (launched here, or at a URL),
each prompt is replayed under that engine's reading, and the per-step accepted counts are compared
(engine_check)."""

from __future__ import annotations

import html

import pandas as pd
import streamlit as st

from backend import BadInput
from backend.service import tasks
from backend.service.engine_check import DEFINITION, EngineCheck, EngineCheckSettings
from backend.service.llamacpp_server import llamacpp_dir
from backend.service.served_engines import TITLES, ServerOptions
from backend.service.vllm_server import DEFAULT_PYTHON
from ui import state
from ui.html import md
from ui.numbers import whole
from ui.pickers import first_samples
from ui.taskview import task_panel

INTRO = (
    "Hold the replay against a real engine. vLLM's CPU build or llama.cpp's server serves the active pair "
    "(SpecLens starts it on 127.0.0.1 and stops it after: vLLM takes about a minute to start, llama.cpp a few "
    "seconds once the pair is converted to GGUF), or give the URL of a server you run: vLLM's OpenAI server "
    "started with `--per-request-spec-decode-metrics detailed`, or llama-server with `LLAMA_TRACE=1` and its "
    "log in a file. Each prompt is sent as token ids (greedy) and replayed offline under the chosen reading of "
    "that engine; the table says per prompt whether the accepted counts are equal step for step, or where "
    "they first differ."
)
READINGS = {
    "vllm": "vLLM 0.32, V1 runner (the CPU build)",
    "vllm-v2": "vLLM 0.32, V2 runner (the GPU default)",
    "llamacpp": "llama.cpp (llama-server, --spec-type draft-eagle3)",
}
ENGINE_READINGS = {"vllm": ("vllm", "vllm-v2"), "llamacpp": ("llamacpp",)}


def _render(result: EngineCheck) -> None:
    equal = result.equal_prompts == result.prompts
    name = TITLES.get(result.engine, "vLLM")
    (st.success if equal else st.warning)(result.headline)
    launched = result.launched
    if launched and launched.converter_layers_line:
        st.caption("llama.cpp's converter: " + html.escape(launched.converter_layers_line))
    if launched and launched.aux_layers_line:
        st.caption(
            f"{name}'s log: "
            + html.escape(launched.aux_layers_line.split("]")[-1].strip())
            + f" · ready in {launched.seconds_to_ready:.0f} s"
        )
    st.caption(f"Replayed as {READINGS.get(result.reading, result.reading)} with HF {result.wiring}.")
    rows = []
    for r in result.rows:
        d = r.first_difference
        rows.append(
            {
                "prompt": r.prompt,
                f"{name} accept length": r.served_accept_length,
                "replay accept length": r.replay_accept_length,
                f"steps ({name} / replay)": f"{r.served_steps} / {r.replay_steps}",
                "per-step counts": "equal step for step"
                if d is None
                else f"differ from step {d.step} ({name} {d.served}, replay {d.replay})",
                "same tokens": r.same_tokens,
                "replay run": r.replay_run,
            }
        )
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="vllm_check_table")
    if result.explained_by:
        e = result.explained_by
        st.info(f"{name} ran HF {e.aux_hf_indices} ({e.why}): a replay with that wiring reproduces it.")
    st.caption(f"{DEFINITION}. Kept in {result.folder} (responses.jsonl is readable by observe --requests).")


def vllm_tab() -> None:
    st.markdown(INTRO)
    samples = first_samples("vllm_check", default_n=4)
    engine = st.radio(
        "Engine", list(ENGINE_READINGS), format_func=TITLES.get, horizontal=True, key="engine_check_engine"
    )
    name = TITLES[engine]
    c1, c2, c3 = st.columns(3)
    where = c1.radio(name, ["Launch it here", "At a URL"], horizontal=True, key="vllm_check_where")
    steps = whole(c2, "K (drafted tokens per step)", 1, 8, 4, "vllm_check_steps")
    tokens = whole(c3, "Max new tokens", 8, 512, 96, "vllm_check_tokens")
    url, log = None, None
    if where == "At a URL":
        default = "http://127.0.0.1:8000" if engine == "vllm" else "http://127.0.0.1:8080"
        url = st.text_input("Server URL", default, key=f"{engine}_check_url").strip()
        if engine == "llamacpp":
            log = (
                st.text_input("Its log file (LLAMA_TRACE=1, -np 1)", key="llamacpp_check_log").strip() or None
            )
    elif engine == "vllm" and not DEFAULT_PYTHON.is_file():
        st.info(f"No vLLM here yet ({DEFAULT_PYTHON}): the README's vLLM command installs its CPU build.")
    elif engine == "llamacpp":
        try:
            llamacpp_dir()
        except BadInput as error:
            st.info(md(error))
    readings = ENGINE_READINGS[engine]
    reading = st.selectbox("Replay as", readings, format_func=READINGS.get, key=f"{engine}_check_reading")
    ready = bool(samples) and None not in (steps, tokens)
    if st.button(f"Check against {name}", key="vllm_check_run", disabled=not ready):
        settings = EngineCheckSettings(
            state.target_path(),
            state.draft_path(),
            steps,
            tokens,
            reading,
            options=ServerOptions(server_log=log),
        )
        st.session_state["vllm_check_task"] = tasks.vllm_check_job.start(state.db(), settings, samples, url)
    task_panel("vllm_check_task", _render, adopt="vllm-check")
