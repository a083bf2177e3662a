"""What the Diagnostics tabs share: the active pair's stale note and a lint finding drawn by its
severity."""

from __future__ import annotations

import streamlit as st

from ui import state
from ui.html import md

SHOW_SEVERITY = {"error": st.error, "warning": st.warning, "info": st.info}


def stale_note(signals) -> str | None:
    """Whether `signals` (a result with the `target` and `draft` it ran on) are of another pair."""
    pair = (signals.target, signals.draft)
    if pair != (state.target_path(), state.draft_path()):
        return f"Stale: these signals are for draft {pair[1]} on {pair[0]}, not the active pair."
    return None


def show_finding(finding, with_fix: bool = True) -> None:
    """`finding`: a lint finding (backend/diagnostics/lint.py LintFinding)."""
    text = f"**{finding.severity.upper()} · {finding.code}**: {md(finding.message)}"
    if with_fix and finding.fix:
        text += f"\n\nFix: {md(finding.fix)}"
    SHOW_SEVERITY[finding.severity](text)
