"""Run tables and the shared run loader for the pages."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from backend.engine.records import decoding_mode
from backend.service import runs as stored_runs
from ui import state


def runs_frame(runs: list[stored_runs.RunInfo]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "run": r.id,
                "status": r.status,
                "created": r.created_at.strftime("%Y-%m-%d %H:%M:%S") if r.created_at else "",
                "draft": state.draft_name(r.draft_path),
                "sample": r.sample_ref or "",
                "K": r.params.get("num_steps"),
                "mode": decoding_mode(r.params),
                "engine": r.params.get("engine", ""),
                "tokens": len(r.output_ids),
                "verify steps": r.step_count,
                "accept length": r.metrics.get("mean_accept_length"),
                "acceptance rate": r.metrics.get("acceptance_rate"),
                "aux HF indices": str(r.aux_hf_indices),
                "device · dtype": f"{r.params.get('device', '?')} · {r.params.get('dtype', '?')}",
                "error": (r.error or "").splitlines()[0] if r.error else "",
            }
            for r in runs
        ],
        columns=[
            "run",
            "status",
            "created",
            "draft",
            "sample",
            "K",
            "mode",
            "engine",
            "tokens",
            "verify steps",
            "accept length",
            "acceptance rate",
            "aux HF indices",
            "device · dtype",
            "error",
        ],
    )


def list_runs(limit: int = 500) -> list[stored_runs.RunInfo]:
    return stored_runs.list_runs(state.db(), limit=limit)


@st.cache_data(show_spinner=False, max_entries=32)
def load_run(db_url: str, run_id: int, finished_at) -> tuple:
    """A run and its steps, cached by id (and finish time, so a run that completes is re-read)."""
    return stored_runs.get_run_with_steps(db_url, run_id)


def get_run(run_id: int) -> tuple:
    """(RunInfo or None, its StepRecords)."""
    run = stored_runs.get_run(state.db(), run_id)
    if run is None:
        return None, []
    return load_run(state.db(), run_id, run.finished_at or run.step_count)


ACCEPT_LENGTH_HELP = (
    "accept length = mean over verify steps of (accepted drafts + 1), bonus included; empty (None) for a "
    "run with no verify step"
)
