"""The database: its URL, an engine with its schema ready, sessions, and where artifacts go."""

from __future__ import annotations

import atexit
import json
import math
import os
import sqlite3
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from backend import BadInput
from db import schema

DEFAULT_DB_PATH = Path("data") / "speclens.db"


def database_url(url: str | None = None) -> str:
    """Explicit URL, else SPECLENS_DB_URL, else the SQLite file data/speclens.db."""
    return url or os.environ.get("SPECLENS_DB_URL") or f"sqlite:///{DEFAULT_DB_PATH}"


def make_engine(url: str | None = None) -> Engine:
    """An engine on `url` with its schema created or upgraded (db/schema.py). SQLite: WAL, foreign
    keys, writers wait for each other; the file itself holds every finished run (`session_scope`,
    `settle_at_exit`).
    PostgreSQL (psycopg 3): connections checked before use (a
    shared server restarts), JSON written strictly (PostgreSQL refuses NaN and Infinity)."""
    url = database_url(url)
    path = schema.sqlite_path(url)
    if path is not None and ("?" in url or str(path).startswith("file:")):
        path = None  # a URI (mode=ro, immutable): SQLite's to open as it says, no folder of ours to make
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    opened = schema.engine_url(url)
    try:
        if opened.startswith("postgresql"):
            engine = create_engine(opened, pool_pre_ping=True, json_serializer=strict_json)
        else:
            engine = create_engine(opened)
    except ImportError as error:  # mysql://, oracle://...: a dialect whose driver is not installed
        raise BadInput(
            f"database {schema.display_name(url)}: its driver is not installed ({error.name or error}); "
            "SpecLens ships drivers for SQLite and PostgreSQL (psycopg 3)"
        ) from None
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(connection, _record):
            cursor = connection.cursor()
            try:  # readers (the dashboard) never block the writer; a read-only folder keeps its mode
                cursor.execute("PRAGMA journal_mode=WAL")
            except sqlite3.DatabaseError:
                pass
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")  # concurrent writers wait instead of failing
            cursor.close()

        if path is not None and not schema.read_only(url):
            atexit.register(settle_at_exit, weakref.ref(engine), path)

    schema.prepare(engine, url)
    return engine


def settle_at_exit(engine_ref: weakref.ref, path: Path) -> None:
    """At the end of the process: its connections closed, and the database file made whole and
    standalone when this process was its last user: the write-ahead log folded in and the file put
    back to SQLite's rollback journal (no -wal or -shm beside it), so the file alone, copied, mailed
    or opened read-only by another user, holds every run. Another process still using the file
    keeps it in WAL (SQLite refuses the switch while it is open) and does this at its own end; the
    next opener turns WAL on again. Best effort: nothing here may fail the command that ended."""
    engine = engine_ref()
    if engine is not None:
        engine.dispose()
    if not path.is_file():
        return
    try:
        connection = sqlite3.connect(path, timeout=0)
    except sqlite3.Error:
        return
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.execute("PRAGMA journal_mode=DELETE")
    except sqlite3.Error:
        pass  # in use elsewhere (busy, locked) or read-only now: its last user settles it
    finally:
        connection.close()


def strict_json(value) -> str:
    """JSON that PostgreSQL's json type accepts: a non-finite float (NaN, Infinity) is written as
    null instead of failing the whole write (SQLite keeps them as Python's json writes them)."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), allow_nan=False)


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def artifact_root(url: str | None = None) -> Path:
    """Where safetensors artifacts go: beside a SQLite file, else SPECLENS_ARTIFACT_DIR or data/artifacts."""
    url = database_url(url)
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return Path(url[len("sqlite:///") :]).parent / "artifacts"
    return Path(os.environ.get("SPECLENS_ARTIFACT_DIR", "data/artifacts"))


def session_factory(engine: Engine) -> sessionmaker:
    return sessionmaker(engine, expire_on_commit=False)


SETTLE = "settle"  # session.info key: this transaction ends something a copy of the file must hold


def settle_after_commit(session: Session) -> None:
    """Ask for the write-ahead log to be copied into the SQLite file once this transaction commits:
    what a repository function calls when it ends something (a run finished or failed, a run
    deleted, a dataset imported), so that the file alone, copied while the dashboard still runs,
    holds it; SQLite's own checkpoint waits for 1,000 pages. A run's step batches are not settled one
    by one (a checkpoint per batch would double its writes, and on a full disk compete with them)."""
    session.info[SETTLE] = True


@contextmanager
def session_scope(factory: sessionmaker) -> Iterator[Session]:
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        settle = session.info.pop(SETTLE, False)
        session.close()
    if settle:
        checkpoint(factory.kw["bind"])


def checkpoint(engine: Engine, mode: str = "PASSIVE") -> None:
    """A checkpoint of a SQLite file's write-ahead log; PASSIVE never waits for a reader (what a reader
    still holds follows at the next one). Best effort: a full disk or a busy file must not fail the
    write that committed. Nothing on other databases."""
    if engine.dialect.name != "sqlite":
        return
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql(f"PRAGMA wal_checkpoint({mode})")
    except Exception:  # noqa: BLE001 - sqlite3 and SQLAlchemy errors alike; the commit stands
        pass
