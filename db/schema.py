"""The database schema under control: created and upgraded once, by one opener at a time, with its
version recorded; a database newer than this code is refused.

Versions: 1 = the tables before versioning (no version row); 2 = the steps' `tree` column and the
runs' writer heartbeat (`writer_host`, `writer_pid`, `heartbeat_at`). An upgrade adds what a version
lacks (new tables, new nullable columns), so it is safe on any older database. Concurrent first
openers (8 processes on one new SQLite file) serialise on a lock file beside the database, or on a
transaction-scoped advisory lock on PostgreSQL, so `create_all` never races ("table already exists").
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Integer, inspect, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Mapped, mapped_column

from backend import BadInput
from db.models import Base

SCHEMA_VERSION = 2
ADVISORY_LOCK_KEY = 0x5EC1E25  # PostgreSQL pg_advisory_xact_lock key for schema changes


class SchemaVersion(Base):
    __tablename__ = "speclens_schema"
    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(Integer)


def sqlite_path(url: str) -> Path | None:
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return Path(url[len("sqlite:///") :])
    return None


def prepare(engine: Engine, url: str) -> None:
    """Create or upgrade the schema to SCHEMA_VERSION; BadInput naming the database when it is not
    a database, or is newer than this code."""
    where = sqlite_path(url) or url
    try:
        with _first_open_lock(engine, url):
            found = stored_version(engine)
            if found is not None and found > SCHEMA_VERSION:
                raise BadInput(
                    f"{where}: the database has schema version {found}, newer than this SpecLens "
                    f"({SCHEMA_VERSION}); upgrade SpecLens or use another database"
                )
            if found != SCHEMA_VERSION:
                Base.metadata.create_all(engine)
                _add_missing_columns(engine)
                _record(engine)
    except DBAPIError as error:
        reason = str(error.orig).splitlines()[0] if error.orig is not None else type(error).__name__
        raise BadInput(f"{where}: cannot open the database ({reason})") from None


def stored_version(engine: Engine) -> int | None:
    """The recorded version; 1 for SpeclLens tables without one; None for an empty database."""
    tables = set(inspect(engine).get_table_names())
    if SchemaVersion.__tablename__ in tables:
        with engine.connect() as connection:
            return connection.scalar(select(SchemaVersion.version).order_by(SchemaVersion.id.desc()))
    return 1 if "runs" in tables else None


def _record(engine: Engine) -> None:
    with engine.begin() as connection:
        connection.execute(SchemaVersion.__table__.delete())
        connection.execute(SchemaVersion.__table__.insert().values(id=1, version=SCHEMA_VERSION))


def _add_missing_columns(engine: Engine) -> None:
    """Databases made by earlier versions lack newer nullable columns; add them in place."""
    inspector = inspect(engine)
    for table in Base.metadata.sorted_tables:
        have = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name not in have and column.nullable:
                with engine.begin() as connection:
                    kind = column.type.compile(engine.dialect)
                    connection.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}'))


@contextmanager
def _first_open_lock(engine: Engine, url: str):
    """One opener at a time changes the schema."""
    path = sqlite_path(url)
    if engine.dialect.name == "postgresql":
        with engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_LOCK_KEY})
        return
    if path is None:
        yield
        return
    try:
        handle = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # a read-only folder: nobody can change the schema there anyway
        yield
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        os.close(handle)
