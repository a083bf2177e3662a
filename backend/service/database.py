"""The database a request writes to: one engine and session factory per URL, opened once per process."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import sessionmaker

from db import store


@dataclass(frozen=True)
class Database:
    url: str
    factory: sessionmaker
    artifact_dir: Path  # where runs' safetensors artifacts go

    def close(self) -> None:
        """Release the connections (before deleting a temporary database file)."""
        self.factory.kw["bind"].dispose()


def open_database(url: str | None = None) -> Database:
    """The database at `url` (default: SPECLENS_DB_URL or data/speclens.db), created on first use."""
    return _open(store.database_url(url))


@lru_cache(maxsize=8)
def _open(url: str) -> Database:
    database = Database(url, store.session_factory(store.make_engine(url)), store.artifact_root(url))
    reap(database)
    return database


def reap(database: Database) -> list[int]:
    """Runs whose writer died (SIGKILL, a crash, a lost machine) become interrupted, keeping their
    steps and partial output; a read-only database is left as it is."""
    try:
        with store.session_scope(database.factory) as session:
            reaped = store.reap_stale_runs(session)
    except OperationalError:
        return []
    if reaped and database.artifact_dir is not None:
        from backend.service.jobs import recover_artifact  # torch, only when there is something to merge

        for run_id in reaped:
            artifact = recover_artifact(database.artifact_dir, run_id)
            if artifact["artifact_path"]:
                with store.session_scope(database.factory) as session:
                    store.set_artifact(session, run_id, **artifact)
    return reaped


def database_url(url: str | None = None) -> str:
    return store.database_url(url)
