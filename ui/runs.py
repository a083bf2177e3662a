"""Run tables and the shared run loader for the pages."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import streamlit as st

from backend.service import runs as stored_runs
from ui import state

COLUMNS = [
    "run",
    "status",
    "created",
    "target",
    "draft",
    "sample",
    "K",
    "mode",
    "engine",
    "tokens",
    "verify steps",
    "accept length",
    "acceptance rate",
    "wall s",
    "tokens/s",
    "aux HF indices",
    "device · dtype",
    "error",
]
WALL_HELP = (
    "wall s: the run's record created -> finished (the replay, stored as it runs; model loading before it "
    "is not counted); tokens/s = output tokens / wall s"
)


def short_path(path: str) -> str:
    """The last two parts of a model directory (demo/target, smollm2/target): both bundled targets are
    called `target`."""
    parts = Path(path).parts
    return "/".join(parts[-2:]) if len(parts) >= 2 else path


def sample_name(
    ref: str | None, datasets: dict[int, str], prompt: str | None = None, source: str | None = None
) -> str:
    """'dataset 2 #5' as 'humaneval.jsonl #5 (dataset 2)', with the sample's source when the dataset
    names one ('HumanEval/2'), so the search finds a source by name; a typed prompt by its start; a
    samples file's record ('eval.jsonl#2', from `replay --samples`) with `source`, read from that file
    (stored_runs.file_sample_sources), as the store has none for it."""
    if source and ref and "#" in ref and not ref.startswith("dataset "):
        return f"{ref} ({source})"
    match = re.fullmatch(r"dataset (\d+) #(\d+)", ref or "")
    if match and int(match.group(1)) in datasets:
        dataset, index = int(match.group(1)), int(match.group(2))
        source = _source(dataset, index)
        return f"{datasets[dataset]} #{index} (dataset {dataset}{f', {source}' if source else ''})"
    if ref == "prompt" and prompt:
        start = " ".join(prompt.split())
        return f"prompt: {start[:40]}{'…' if len(start) > 40 else ''}"
    return ref or ""


def _source(dataset_id: int, index: int) -> str | None:
    from ui.pickers import samples_of

    try:
        samples = samples_of(state.db(), dataset_id)
    except Exception:  # noqa: BLE001 - a label only: a dataset that cannot be read has no source to show
        return None
    return samples[index].source if 0 <= index < len(samples) else None


def sample_labels(
    runs: list[stored_runs.RunInfo], datasets: dict[int, str], prompts: dict[int, str]
) -> dict[int, str]:
    """Run id -> its sample as the Runs page names it wherever it names a run (the table, the picker,
    the facts), so a typed prompt reads 'prompt: def fib(n):' in all three; also what 'Sample
    contains' matches. `prompts`: run id -> prompt text (stored_runs.prompt_texts); each samples file
    is read once for all the runs."""
    sources = stored_runs.file_sample_sources(runs)
    return {r.id: sample_name(r.sample_ref, datasets, prompts.get(r.id), sources.get(r.id)) for r in runs}


def run_name(run, sample: str) -> str:
    """The picker's line for a run (ui.pickers.run_label, shared by the pages) with its sample named
    as the Runs page's table names it (`sample`, from sample_labels) rather than its stored ref."""
    from dataclasses import replace

    from ui.pickers import run_label

    return run_label(replace(run, sample_ref=sample))


def wall_seconds(run) -> float | None:
    if run.finished_at is None or run.created_at is None:
        return None
    return max(0.0, (run.finished_at - run.created_at).total_seconds())


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def runs_frame(
    runs: list[stored_runs.RunInfo], datasets: dict[int, str] | None = None, labels: dict | None = None
) -> pd.DataFrame:
    """`labels`: run id -> the sample as the Runs page names it (sample_labels); without them a
    sample by its stored ref and its dataset's name (the home page)."""
    rows = []
    for r in runs:
        wall = wall_seconds(r)
        rows.append(
            {
                "run": r.id,
                "status": r.status,
                "created": r.created_at.strftime("%Y-%m-%d %H:%M:%S") if r.created_at else "",
                "target": short_path(r.target_path),
                "draft": state.draft_name(r.draft_path),
                "sample": (labels or {}).get(r.id) or sample_name(r.sample_ref, datasets or {}),
                "K": r.resolved.num_steps,
                "mode": r.resolved.mode,
                "engine": r.resolved.engine or "",
                "tokens": len(r.output_ids),
                "verify steps": r.step_count
                if r.measured.verify_steps is None
                else r.measured.verify_steps,  # a plain decode is no verify step
                "accept length": _rounded(r.measured.mean_accept_length),  # as the facts show it
                "acceptance rate": _rounded(r.measured.acceptance_rate),
                "wall s": None if wall is None else round(wall, 1),
                "tokens/s": round(len(r.output_ids) / wall, 1) if wall else None,
                "aux HF indices": str(r.aux_hf_indices),
                "device · dtype": f"{r.resolved.device or '?'} · {r.resolved.dtype or '?'}",
                "error": (r.error or "").splitlines()[0] if r.error else "",
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def run_facts(run, steps: int, sample: str | None = None) -> pd.DataFrame:
    """The chosen run as labelled rows (what, value); `sample`: its sample as the table names it
    (sample_labels), else read here."""
    wall = wall_seconds(run)
    resolved = run.resolved
    al = run.measured.mean_accept_length
    facts = [
        ("target", run.target_path),
        ("draft", run.draft_path),
        ("sample", sample or sample_name(run.sample_ref, dataset_names())),
        (
            "decoding",
            f"K = {resolved.num_steps}, {resolved.mode}, read as {resolved.engine or '?'}",
        ),
        ("aux HF indices", f"{run.aux_hf_indices} ({resolved.wiring_source})"),
        ("device · dtype", f"{resolved.device or '?'} · {resolved.dtype or '?'}"),
        ("target's side", resolved.target_forward or "?"),  # its forward here, or a trace (docs/traces.md)
        ("accept length", "—" if al is None else f"{al:.3f} (mean of a + 1 over {steps} verify steps)"),
        ("output tokens", str(len(run.output_ids))),
        (
            "created → finished",
            f"{run.created_at:%Y-%m-%d %H:%M:%S} → "
            + (f"{run.finished_at:%Y-%m-%d %H:%M:%S}" if run.finished_at else "—"),
        ),
        (
            "wall",
            "—"
            if wall is None
            else f"{wall:.1f} s, {len(run.output_ids) / wall:.1f} tokens/s"
            if wall
            else "0 s",
        ),
    ]
    return pd.DataFrame(facts, columns=["what", "value"])


def dataset_names() -> dict[int, str]:
    from backend.service.datasets import list_datasets

    return {d.id: d.name for d in list_datasets(state.db())}


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
