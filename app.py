"""SpecLens home: the active database and target/draft pair, what the tool does, recent runs, and
links to every page. Reads the store only (no torch here)."""

from __future__ import annotations

import streamlit as st

from ui import state
from ui.home import show_demo_story
from ui.runs import ACCEPT_LENGTH_HELP, list_runs, runs_frame
from ui.state import PAGES

st.set_page_config(page_title="SpecLens", layout="wide")
state.sidebar()
st.title("SpecLens")
st.write(
    "What really happens inside EAGLE-3 speculative decoding, token by token. SpecLens loads a Hugging "
    "Face target and an EAGLE-3 draft, replays speculative decoding on a sample, records every draft "
    "proposal, acceptance, rejection point, bonus token and the hidden states involved, and helps you "
    "find why a draft that trains well is rejected when served: wrong aux-layer wiring, a broken vocab "
    "mapping, serving flags silently rewritten."
)
left, right = st.columns(2)
with left:
    st.subheader("Active setup")
    st.markdown(
        f"- **Database:** `{state.db_url()}` ({state.db_backend()})\n- **Target:** `{state.target_path()}`\n"
        f"- **Draft:** `{state.draft_path()}` ({state.draft_name(state.draft_path())})"
    )
    st.caption(state.active_setup_note())
with right:
    st.subheader("Pages")
    for path, _, label in PAGES[1:]:
        st.page_link(path, label=label)
show_demo_story(state.target_path())
st.subheader("Recent runs")
runs = list_runs(limit=20)
if not runs:
    st.info("No runs yet. Open **Decode**, pick a sample of the demo dataset and press Start.")
else:
    st.dataframe(runs_frame(runs), hide_index=True, width="stretch", key="home_runs")
    st.caption(ACCEPT_LENGTH_HELP)
