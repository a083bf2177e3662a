"""SpecLens home page: which database is active and the recent runs stored in it.

Placeholder for the dashboard issue: it reads the store only (no torch here). Start runs with
`python -m backend replay ...`; they appear below.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from db import store

st.set_page_config(page_title="SpecLens", layout="wide")


@st.cache_resource
def engine():
    return store.make_engine()


st.title("SpecLens")
st.write("What really happens inside EAGLE-3 speculative decoding, token by token: every draft proposal, "
         "acceptance, rejection point and bonus token of a replay, with the hidden states involved.")
st.caption(f"Database: `{store.database_url()}` (set SPECLENS_DB_URL to change it)")

with store.session_scope(store.session_factory(engine())) as session:
    runs = store.list_runs(session, limit=50)

st.subheader("Recent runs")
if not runs:
    st.info("No runs yet. Start one from a terminal: `python -m backend replay --target DIR --draft DIR "
            "--prompt \"...\" --steps 4 --max-new-tokens 128`")
else:
    st.dataframe(pd.DataFrame([{
        "run": r.id, "status": r.status, "created": r.created_at, "draft": r.draft_path,
        "K": r.params.get("num_steps"), "tokens": len(r.output_ids),
        "accept length": r.metrics.get("mean_accept_length"), "aux HF indices": str(r.aux_hf_indices),
        "error": (r.error or "").splitlines()[0] if r.error else "",
    } for r in runs]), hide_index=True, width="stretch")
    st.caption("accept length = mean over verify steps of a + 1, bonus token included (SGLang / vLLM convention)")
