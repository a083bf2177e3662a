"""Export a stored run: its steps as a table (CSV, Parquet) or the whole run as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from backend.run.records import StepRecord, stored_fields
from db import store

EXPORT_FORMATS = ("csv", "json", "parquet")


class ExportError(ValueError):
    pass


def steps_frame(steps: list[StepRecord], run: store.RunInfo | None = None, text=None) -> pd.DataFrame:
    """One row a verify step: `step` numbered from 1 as the dashboard shows it, the stored fields,
    the tokens as text when `text` (ids -> str, the target's tokenizer) is given, and the run's
    identity on every row so a row read alone says where it came from."""
    rows = []
    for step in steps:
        row = {"step": step.step_index + 1}
        if run is not None:
            row.update(
                run_id=run.id,
                target=Path(run.target_path).name,
                draft=Path(run.draft_path).name,
                num_steps_k=run.params.get("num_steps"),
            )
        row.update(stored_fields(step))
        row["drafted_count"] = len(step.drafted_ids)
        if text is not None:
            row["drafted_text"] = text(step.drafted_ids)
            row["accepted_text"] = text(step.drafted_ids[: step.accepted_count])
            row["bonus_text"] = text([step.bonus_id])
            row["committed_text"] = text(step.committed_ids)
        rows.append(row)
    return pd.DataFrame(rows)


def run_document(run: store.RunInfo, steps: list[StepRecord]) -> dict:
    document = asdict(run)
    document["created_at"] = run.created_at.isoformat() if run.created_at else None
    document["finished_at"] = run.finished_at.isoformat() if run.finished_at else None
    document["heartbeat_at"] = run.heartbeat_at.isoformat() if run.heartbeat_at else None
    document["steps"] = [stored_fields(s) for s in steps]
    return document


def export_run(factory, run_id: int, format: str, out: str | Path, text_for=None) -> Path:
    """`text_for(target_path)`: the ids -> text function for the run's target (or None)."""
    if format not in EXPORT_FORMATS:
        raise ExportError(f"unknown format {format!r}; use one of {', '.join(EXPORT_FORMATS)}")
    with store.session_scope(factory) as session:
        run = store.get_run(session, run_id)
        if run is None:
            raise ExportError(f"no run {run_id} in this database")
        steps = store.get_steps(session, run_id)
    out = Path(out)
    check_target(out, factory)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(export_bytes(run, steps, format, text_for(run.target_path) if text_for else None))
    except OSError as error:
        raise ExportError(f"{out}: cannot write ({error.strerror or error})") from None
    return out


def check_target(out: Path, factory) -> None:
    """Refuse an output that would destroy something: the database itself (or its -wal / -shm /
    -journal / .lock files), a directory, or anything that is not a regular file."""
    url = str(factory.kw["bind"].url)
    database = Path(url[len("sqlite:///") :]) if url.startswith("sqlite:///") else None
    if database is not None and database.name and database.name != ":memory:":
        protected = {database.resolve()} | {
            Path(f"{database.resolve()}{suffix}") for suffix in ("-wal", "-shm", "-journal", ".lock")
        }
        if out.resolve() in protected:
            raise ExportError(
                f"{out}: that is the database (or one of its files); choose another output file"
            )
    if out.is_dir():
        raise ExportError(f"{out}: is a directory; give a file name")
    if out.exists() and not out.is_file():
        raise ExportError(f"{out}: not a regular file")


def export_bytes(run: store.RunInfo, steps: list[StepRecord], format: str, text=None) -> bytes:
    """The file's content, for the dashboard's download button and the CLI alike; `text`: ids -> str
    (the target's tokenizer) for the text columns."""
    if format == "json":
        return json.dumps(run_document(run, steps), indent=1).encode()
    frame = steps_frame(steps, run, text)
    if format == "csv":
        for column in frame.columns:  # lists and dicts as JSON text: one cell per step, readable back
            if frame[column].map(lambda v: isinstance(v, (list, dict))).any():
                frame[column] = frame[column].map(json.dumps)
        return frame.to_csv(index=False).encode()
    if format == "parquet":
        import io

        buffer = io.BytesIO()
        for column in frame.columns:  # a step's tree: JSON text (its keys differ between runs)
            if frame[column].map(lambda v: isinstance(v, dict)).any():
                frame[column] = frame[column].map(lambda v: None if v is None else json.dumps(v))
        frame.to_parquet(buffer, index=False)
        return buffer.getvalue()
    raise ExportError(f"unknown format {format!r}; use one of {', '.join(EXPORT_FORMATS)}")
