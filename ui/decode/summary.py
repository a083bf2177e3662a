"""The Decode page's run summary: per-position acceptance, the accepted-count histogram and the
step times, each with its definition."""

from __future__ import annotations

import streamlit as st

from backend.engine.metrics import DEFINITIONS
from backend.engine.records import StepRecord
from backend.service.runs import RunInfo
from ui import charts
from ui.runs import ACCEPT_LENGTH_HELP


def run_summary(run: RunInfo, steps: list[StepRecord]) -> None:
    metrics = run.metrics or {}
    st.subheader("Run summary")
    left, right = st.columns(2)
    left.plotly_chart(
        charts.acceptance_bars(
            {
                "marginal P(a >= i)": metrics.get("per_position_marginal") or [],
                "conditional P(a >= i | a >= i-1)": [
                    v or 0 for v in metrics.get("per_position_conditional") or []
                ],
            },
            "Per-position acceptance",
        ),
        key="decode_acceptance",
    )
    right.plotly_chart(
        charts.histogram(metrics.get("accept_histogram") or [], "Accepted drafts per step"),
        key="decode_histogram",
    )
    st.plotly_chart(
        charts.step_times([s.draft_ms for s in steps], [s.verify_ms for s in steps]), key="decode_times"
    )
    st.caption(
        f"{ACCEPT_LENGTH_HELP}. Marginal: {DEFINITIONS.get('per_position_marginal', '')}. "
        f"Conditional: {DEFINITIONS.get('per_position_conditional', '')}."
    )
