"""Stored runs for the pages and the CLI: list, read, delete, export, hidden-state rows."""

from __future__ import annotations

from pathlib import Path

from backend import BadInput
from backend.engine.records import StepRecord
from backend.service.database import open_database, reap
from db import store
from db.export import ExportError, export_bytes, export_run

RunInfo = store.RunInfo


def list_runs(db_url: str | None, limit: int = 500) -> list[RunInfo]:
    database = open_database(db_url)
    reap(database)  # a run whose writer died is shown as interrupted, never as running
    with store.session_scope(database.factory) as session:
        return store.list_runs(session, limit=limit)


def get_run(db_url: str | None, run_id: int) -> RunInfo | None:
    database = open_database(db_url)
    reap(database)
    with store.session_scope(database.factory) as session:
        return store.get_run(session, run_id)


def get_run_with_steps(db_url: str | None, run_id: int) -> tuple[RunInfo | None, list[StepRecord]]:
    with store.session_scope(open_database(db_url).factory) as session:
        run = store.get_run(session, run_id)
        return run, store.get_steps(session, run_id) if run else []


def delete_run(db_url: str | None, run_id: int) -> bool:
    """Delete a run; BadInput while it is still recording."""
    try:
        with store.session_scope(open_database(db_url).factory) as session:
            return store.delete_run(session, run_id)
    except store.RunBusy as busy:
        raise BadInput(str(busy)) from None


def token_stats(db_url: str | None, run_id: int, reference: str | None = None) -> list[dict]:
    with store.session_scope(open_database(db_url).factory) as session:
        return store.get_token_stats(session, run_id, reference)


def token_stat_references(db_url: str | None, run_id: int) -> list[str]:
    with store.session_scope(open_database(db_url).factory) as session:
        return store.token_stat_references(session, run_id)


def run_file(run: RunInfo, steps: list[StepRecord], format: str) -> bytes:
    """The run as CSV, JSON or Parquet bytes (the dashboard's download buttons)."""
    return export_bytes(run, steps, format)


def export(db_url: str | None, run_id: int, format: str, out: str | Path) -> Path:
    try:
        return export_run(open_database(db_url).factory, run_id, format, out)
    except ExportError as error:
        raise BadInput(str(error)) from error
