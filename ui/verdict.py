"""The diagnostics' one verdict, drawn the same way on the Diagnostics page and in the doctor."""

from __future__ import annotations

import streamlit as st

from ui.html import md

SHOW = {"ok": st.success, "unverified": st.info, "warning": st.warning, "error": st.error}
WORDS = {"ok": "Healthy", "unverified": "Unverified", "warning": "Warning", "error": "Broken"}


def show_verdict(verdict: dict, stale: str | None = None) -> None:
    text = f"**{WORDS[verdict['level']]}**: {md(verdict['headline'])}"
    if verdict.get("next_check"):
        text += f"\n\n**Next: {md(verdict['next_step'])}**, because {md(verdict['next_why'])}."
    if stale:
        text = f"*{md(stale)}*\n\n" + text
    SHOW[verdict["level"]](text)
    st.caption(
        "Signals: " + "; ".join(f"{name}: {md(str(state))}" for name, state in verdict["signals"].items())
    )
    if verdict["reasons"]:
        with st.expander("Why (every signal)"):
            st.markdown("\n".join(f"- {md(reason)}" for reason in verdict["reasons"]))
