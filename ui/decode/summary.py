"""The Decode page's run summary: per-position acceptance, the accepted-count histogram and the
step times, each with its definition."""

from __future__ import annotations

import streamlit as st

from backend.run.metrics import DEFINITIONS
from backend.run.records import StepRecord, verify_counts
from backend.service.engine_check import first_difference
from backend.service.engine_check_result import served_beside
from backend.service.runs import RunInfo
from ui import charts, state
from ui.runs import ACCEPT_LENGTH_HELP


def run_summary(run: RunInfo, steps: list[StepRecord]) -> None:
    metrics = run.measured
    st.subheader("Run summary")
    left, right = st.columns(2)
    left.plotly_chart(
        charts.acceptance_bars(
            {
                "marginal P(a >= i)": list(metrics.per_position_marginal),
                "conditional P(a >= i | a >= i-1)": [v or 0 for v in metrics.per_position_conditional],
            },
            "Per-position acceptance",
        ),
        key="decode_acceptance",
    )
    right.plotly_chart(
        charts.histogram(list(metrics.accept_histogram), "Accepted drafts per step"),
        key="decode_histogram",
    )
    st.plotly_chart(
        charts.step_times([s.draft_ms for s in steps], [s.verify_ms for s in steps]), key="decode_times"
    )
    st.caption(
        f"{ACCEPT_LENGTH_HELP}. Marginal: {DEFINITIONS.get('per_position_marginal', '')}. "
        f"Conditional: {DEFINITIONS.get('per_position_conditional', '')}."
    )


def served_by_vllm(run: RunInfo, steps: list[StepRecord]) -> None:
    """vLLM's own accepted count per step beside the replay's, when an engine check served this prompt."""
    served = served_beside(state.db(), run)
    if served is None:
        return
    replayed, counts = verify_counts(steps), served.served_per_step
    name = served.engine
    st.subheader(f"Served by {name}")
    step = first_difference(counts, replayed)
    said = (
        "equal step for step"
        if step is None
        else f"first difference at step {step + 1}: {name} accepted "
        f"{counts[step] if step < len(counts) else '-'}, "
        f"the replay {replayed[step] if step < len(replayed) else '-'}"
    )
    (st.success if step is None else st.warning)(
        f"{name} {'launched here' if served.launched else f'at {served.url}'} (check {served.check}"
        + ("" if served.same_run else ", the same prompt and K")
        + f"): {said}"
    )
    st.plotly_chart(charts.served_steps(counts, replayed, step, name), key="decode_served_steps")
    st.caption(
        f"Accepted drafts a per verify step: {name}'s own count (vLLM: metrics.speculative_decoding."
        "per_step_accepted; llama.cpp: its trace) beside the "
        "replay's (a + 1 tokens committed per step, bonus included)."
    )
