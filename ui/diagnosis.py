"""`diagnose`'s verdict and findings (backend/service/diagnosis.py), drawn from the same object the CLI
prints with --json."""

from __future__ import annotations

import json

import streamlit as st

from ui.html import md

SHOW = {"ok": st.success, "suspect": st.warning, "broken": st.error}
WORDS = {"ok": "OK", "suspect": "Suspect", "broken": "Broken"}
ICONS = {"fail": "**fail**", "warn": "**warn**", "info": "info"}


def show_diagnosis(result: dict, stale: str | None = None) -> None:
    text = f"**{WORDS[result['verdict']]}**: {md(result['headline'])}"
    if stale:
        text = f"*{md(stale)}*\n\n" + text
    SHOW[result["verdict"]](text)
    st.caption(
        f"Read as {md(result.get('engine', ''))}; aux HF indices {result.get('aux_hf_indices')}; "
        f"{result.get('n_samples', 0)} samples. Checks: "
        + "; ".join(f"{md(k)}: {md(str(v))}" for k, v in result["checks"].items())
    )
    for finding in result["findings"]:
        label = f"{ICONS[finding['severity']]} · {finding['class']} · {md(finding['message'][:120])}"
        with st.expander(label, expanded=finding["severity"] == "fail"):
            st.markdown(md(finding["message"]))
            if finding["fix"]:
                st.markdown(f"**Fix:** {md(finding['fix'])}")
            st.code(json.dumps(finding["evidence"], indent=1, default=str)[:4000], language="json")
