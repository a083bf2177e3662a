"""The "Served by an engine" tab: vLLM or llama.cpp serves the active pair (launched here, or at a URL),
each prompt is replayed under that engine's reading, and the per-step accepted counts are compared
(engine_check)."""

from __future__ import annotations

import html

import pandas as pd
import streamlit as st

from backend import BadInput, first_line
from backend.run.request import ReplayRequest
from backend.service import tasks
from backend.service.engine_check import EngineCheckSettings
from backend.service.engine_check_result import DEFINITION, EngineCheck
from backend.service.served_engines import ServerOptions, served_engine, served_engines
from ui import state
from ui.html import md
from ui.numbers import setting_input, setting_number
from ui.pickers import first_samples
from ui.taskview import task_panel

INTRO = (
    "Hold the replay against a real engine. vLLM's CPU build or llama.cpp's server serves the active pair "
    "(SpecLens starts it on 127.0.0.1 and stops it after: vLLM takes about a minute to start, llama.cpp a few "
    "seconds once the pair is converted to GGUF), or give the URL of a server you run: vLLM's OpenAI server "
    "started with `--per-request-spec-decode-metrics detailed`, or llama-server with `LLAMA_TRACE=1` and its "
    "log in a file. Each prompt is sent as token ids and replayed offline under the chosen reading of "
    "that engine; the table says per prompt whether the accepted counts are equal step for step, or where "
    "they first differ. Greedy (temperature 0) the replay decodes on its own; sampled, each answer is "
    "replayed along the tokens the engine emitted (every engine drafts greedily and keeps a draft exactly "
    "when it emits it), so the counts are held step for step while the random draws stay the engine's."
)


def _render(result: EngineCheck) -> None:
    equal = result.equal_prompts == result.prompts
    name = served_engine(result.engine).title
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
    described = served_engine(result.engine).readings.get(result.reading, result.reading)
    st.caption(f"Replayed as {described} with HF {result.wiring}.")
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
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="engine_check_table")
    if result.explained_by:
        e = result.explained_by
        st.info(f"{name} ran HF {e.aux_hf_indices} ({e.why}): a replay with that wiring reproduces it.")
    st.caption(f"{DEFINITION}. Kept in {result.folder} (responses.jsonl is readable by observe --requests).")


def served_tab() -> None:
    st.markdown(INTRO)
    samples = first_samples("engine_check", default_n=4)
    engines = {engine.name: engine for engine in served_engines()}
    chosen = st.radio(
        "Engine",
        list(engines),
        format_func=lambda n: engines[n].title,
        horizontal=True,
        key="engine_check_engine",
    )
    engine = engines[chosen]
    c1, c2, c3 = st.columns(3)
    where = c1.radio(engine.title, ["Launch it here", "At a URL"], horizontal=True, key="engine_check_where")
    steps = setting_number(c2, "num_steps", "engine_check_steps")
    tokens = setting_number(c3, "max_new_tokens", "engine_check_tokens")
    c4, c5, _ = st.columns(3)
    temperature = setting_input(c4, "temperature", "engine_check_temperature")
    seed = setting_input(c5, "seed", "engine_check_seed")
    url, log = None, None
    if where == "At a URL":
        url = st.text_input("Server URL", engine.default_url, key=f"{engine.name}_check_url").strip()
        if engine.log_at_url:
            log = st.text_input(engine.log_at_url, key=f"{engine.name}_check_log").strip() or None
    else:
        missing = engine.missing(ServerOptions())
        if missing:
            st.info(f"{engine.title} cannot be launched here yet: {md(missing)}")
    reading = st.selectbox(
        "Replay as",
        list(engine.readings),
        format_func=engine.readings.get,
        key=f"{engine.name}_check_reading",
    )
    ready = bool(samples) and None not in (steps, tokens)
    if st.button(f"Check against {engine.title}", key="engine_check_run", disabled=not ready):
        try:
            _start(samples, steps, tokens, reading, temperature, seed, url, log)
        except BadInput as error:  # a setting out of its range: one line, as every form says it
            st.error(first_line(error))
    task_panel("engine_check_task", _render, adopt="engine-check")


def _start(samples, steps, tokens, reading, temperature, seed, url, log) -> None:
    """The check started as a task (BadInput: a setting the request refuses)."""
    request = ReplayRequest(
        state.target_path(),
        state.draft_path(),
        prompt_ids=tuple(samples[0].prompt_ids),
        num_steps=steps,
        max_new_tokens=tokens,
        engine=reading,
        temperature=temperature,
        seed=seed,
    )
    settings = EngineCheckSettings(request, options=ServerOptions(server_log=log))
    st.session_state["engine_check_task"] = tasks.engine_check_job.start(state.db(), settings, samples, url)
