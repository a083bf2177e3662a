"""The server-vs-replay tab: the server's own numbers (an SGLang log, a vLLM scrape) beside the
offline replay of the active draft at the same K."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from backend import BadInput
from backend.service import observations
from ui import charts, state
from ui.diagnostics.common import show_finding
from ui.diagnostics.features import features_section
from ui.runs import ACCEPT_LENGTH_HELP
from ui.server_requests import requests_section

INTRO = (
    "Put the server's own numbers beside the replay: paste an SGLang server log or a vLLM `/metrics` scrape "
    "(or give a file path or URL). The accept length, the settings the server ran with, the flag findings and "
    "the offline replay of the active draft at the same K are shown together. The bundled demo has a log of "
    "the seed story's situation (docs/seed-story.md) to try: `demo/data/serving/sglang_seed.log` (constructed "
    "from SpecLens's replay of `miswired`, as its first line says; give it as the path below with `miswired` "
    "active)."
)


def _texts(pasted: str, upload, location: str, earlier: str) -> list[tuple[str, str]]:
    """The observation's texts with their names, from whichever input the user filled."""
    if location.strip():
        texts = [observations.read_source(location.strip())]
    elif upload is not None:
        try:
            texts = [(upload.getvalue().decode("utf-8"), upload.name)]
        except UnicodeDecodeError as error:
            raise BadInput(f"{upload.name}: not UTF-8 text") from error
    elif pasted.strip():
        texts = [(pasted, "pasted text")]
    else:
        raise BadInput("paste a log or a scrape, upload one, or give a path or URL")
    return [(earlier, "earlier pasted scrape"), *texts] if earlier.strip() else texts


def _render(result: observations.ServerComparison) -> None:
    replay = result.replay
    c1, c2, c3 = st.columns(3)
    c1.metric(
        "Server accept length",
        "n/a" if result.accept_length is None else f"{result.accept_length:.2f}",
        help=result.definition,
    )
    c2.metric(
        f"Replay accept length (K={result.num_steps})",
        "n/a" if replay.accept_length is None else f"{replay.accept_length:.2f}",
        help=f"{ACCEPT_LENGTH_HELP}; pooled over {replay.runs} finished replays of the active draft",
    )
    c3.metric("Observation", f"#{result.observation_id}", help=result.source)
    (st.warning if "suspect" in result.verdict else st.info)(result.verdict)
    if result.settings:
        st.caption("Settings the server ran with (after its own rewrites):")
        st.dataframe(pd.DataFrame([result.settings]), hide_index=True, key="server_settings")
    series = {}
    if result.per_position:
        series["server P(a >= i)"] = result.per_position
    if replay.per_position_marginal:
        series["replay P(a >= i)"] = replay.per_position_marginal
    if series:
        st.plotly_chart(
            charts.acceptance_bars(series, "Per-position acceptance, server vs replay"),
            key="server_positions",
        )
    for finding in result.lint:
        show_finding(finding, with_fix=False)


def server_tab() -> None:
    st.markdown(INTRO)
    engine_name = st.radio("Engine", ["SGLang log", "vLLM metrics"], horizontal=True, key="server_engine")
    pasted = st.text_area("Paste the log or the scrape", "", height=160, key="server_text")
    upload = st.file_uploader("...or upload it", type=["log", "txt", "prom"], key="server_upload")
    location = st.text_input("...or a file path or URL (read with a 10 s timeout)", "", key="server_location")
    earlier = ""
    if engine_name == "vLLM metrics":
        earlier = st.text_area(
            "Optional earlier scrape (the window is the later minus the earlier)",
            "",
            height=80,
            key="server_earlier",
        )
    if st.button("Compare", key="server_compare"):
        engine_key = "sglang" if engine_name == "SGLang log" else "vllm"
        try:
            texts = _texts(pasted, upload, location, earlier)
            st.session_state["server_result"] = observations.observe_texts(
                state.db(), engine_key, texts, state.draft_path(), state.target_path()
            )
        except BadInput as error:
            st.session_state["server_result"] = str(error)  # the message, shown instead of a result
    result = st.session_state.get("server_result")
    if isinstance(result, str):
        st.error(result)
    elif result:
        _render(result)
    st.divider()
    requests_section(state.db(), state.target_path(), state.draft_path())  # per-request numbers
    st.divider()
    features_section()  # the features SGLang fed the draft
