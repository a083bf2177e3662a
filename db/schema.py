"""The database schema under control: created and upgraded once, by one opener at a time, by the
Alembic revisions in db/migrations (the same ones on SQLite and PostgreSQL); a database newer than
this code is refused.

Versions (revision ids `0001`, `0002`, ...): 1 = the tables before versioning; 2 = the steps' `tree`
column and the runs' writer heartbeat (`writer_host`, `writer_pid`, `heartbeat_at`); 3 = text from
users (dataset names, sample sources, reference labels) unbounded on PostgreSQL; 4 = the `wiring_probes` table; 5 = the `verdicts` table; 6 = the `run_ids` table
(run ids never handed out twice on SQLite). Two records
sit side by side: Alembic's `alembic_version` (the revision) and `speclens_schema` (the integer
version, which SpecLens builds from before Alembic read to refuse a newer database). A database
made before Alembic has no `alembic_version`: it is upgraded from the first revision, whose
tolerant steps add only what it lacks, and keeps every row.

Concurrent first openers (8 processes on one new database) serialise on a lock file beside a
SQLite database, or on a transaction-scoped advisory lock on PostgreSQL, where the whole upgrade is
one transaction (PostgreSQL's DDL is transactional: a failed upgrade leaves nothing half done).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Integer, inspect, select, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.orm import Mapped, mapped_column

from backend import BadInput
from db.models import Base

SCHEMA_VERSION = 6
HEAD_REVISION = "0006"  # the revision in db/migrations/versions that makes SCHEMA_VERSION
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
ADVISORY_LOCK_KEY = 0x5EC1E25  # PostgreSQL pg_advisory_xact_lock key for schema changes
ALEMBIC_TABLE = "alembic_version"


class SchemaVersion(Base):
    __tablename__ = "speclens_schema"
    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(Integer)


def sqlite_path(url: str) -> Path | None:
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return Path(url[len("sqlite:///") :])
    return None


def engine_url(url: str) -> str:
    """The URL SQLAlchemy opens: a plain `postgresql://` (or `postgres://`) URL goes through
    psycopg 3, whatever SQLAlchemy's default PostgreSQL driver is; others are left as they are."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme) :]
    if read_only(url):
        return read_only_sqlite_url(sqlite_path(url))
    return url


def read_only(url: str) -> bool:
    """A SQLite file this process cannot write, or cannot make SQLite's -wal/-shm beside (a read-only
    file or share, or a read-only mount, even for root): it is opened read-only."""
    path = sqlite_path(url)
    if path is None or "?" in url or not path.is_file():
        return False
    return not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))


def read_only_sqlite_url(path: Path) -> str:
    """Open a SQLite file this process cannot write read-only, so that reads (export, the dashboard's
    pages) work and writes fail with SQLite's 'attempt to write a readonly database'. mode=ro where
    SQLite can make its -shm; in a read-only folder without one, immutable=1: no writer can change the
    file through this path (a writer elsewhere on a share would not be seen)."""
    query = "mode=ro"
    if not os.access(path.parent, os.W_OK) and not Path(f"{path}-shm").exists():
        query += "&immutable=1"
    return f"sqlite:///file:{quote(str(path.resolve()))}?{query}&uri=true"


def display_name(url: str) -> str:
    """How messages name the database: a SQLite file's path, else the URL without its password."""
    path = sqlite_path(url)
    if path is not None:
        return str(path)
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def prepare(engine: Engine, url: str) -> None:
    """Create or upgrade the schema to SCHEMA_VERSION; BadInput naming the database when it is not
    a database, or is newer than this code."""
    where = display_name(url)
    try:
        with _schema_lock(engine, url) as connection:
            _upgrade(connection, where)
    except DBAPIError as error:
        reason = str(error.orig).splitlines()[0] if error.orig is not None else type(error).__name__
        raise BadInput(f"{where}: cannot open the database ({reason})") from None


def _upgrade(connection: Connection, where: str) -> None:
    tables = set(inspect(connection).get_table_names())
    found = _stored_version(connection, tables)
    if found is not None and found > SCHEMA_VERSION:
        raise BadInput(
            f"{where}: the database has schema version {found}, newer than this SpecLens "
            f"({SCHEMA_VERSION}); upgrade SpecLens or use another database"
        )
    revision = alembic_revision(connection, tables)
    if found == SCHEMA_VERSION and revision == HEAD_REVISION:
        return
    if revision is not None and revision not in known_revisions():
        raise BadInput(
            f"{where}: the database is at schema revision {revision!r}, which this SpecLens does not "
            f"know (its newest is {HEAD_REVISION!r}); it was made by a newer SpecLens: upgrade SpecLens "
            "or use another database"
        )
    migrate(connection)
    connection.execute(SchemaVersion.__table__.delete())
    connection.execute(SchemaVersion.__table__.insert().values(id=1, version=SCHEMA_VERSION))


def stored_version(bind: Engine | Connection) -> int | None:
    """The recorded version; 1 for SpecLens tables without one; None for an empty database."""
    if isinstance(bind, Engine):
        with bind.connect() as connection:
            return stored_version(connection)
    return _stored_version(bind, set(inspect(bind).get_table_names()))


def _stored_version(connection: Connection, tables: set[str]) -> int | None:
    if SchemaVersion.__tablename__ in tables:
        found = connection.scalar(select(SchemaVersion.version).order_by(SchemaVersion.id.desc()))
        if found is not None:
            return found
    return 1 if "runs" in tables else None


def alembic_revision(bind: Engine | Connection, tables: set[str] | None = None) -> str | None:
    """The Alembic revision the database is at; None before Alembic (or when empty)."""
    if isinstance(bind, Engine):
        with bind.connect() as connection:
            return alembic_revision(connection)
    if ALEMBIC_TABLE not in (tables if tables is not None else set(inspect(bind).get_table_names())):
        return None
    heads = bind.scalars(text(f"SELECT version_num FROM {ALEMBIC_TABLE}")).all()
    return heads[0] if len(heads) == 1 else (",".join(sorted(heads)) or None)


@lru_cache(maxsize=1)
def _script():
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS))


def known_revisions() -> set[str]:
    return {script.revision for script in _script().walk_revisions()}


def migrate(connection: Connection, revision: str = "head") -> None:
    """Run the Alembic revisions up to `revision` on the caller's connection (and transaction)."""
    from alembic import command
    from alembic.config import Config

    config = Config(attributes={"connection": connection})
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    command.upgrade(config, revision)


@contextmanager
def _schema_lock(engine: Engine, url: str) -> Iterator[Connection]:
    """A connection on which one opener at a time reads and changes the schema; committed at the end."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
            yield connection
            connection.commit()  # releases the lock
        return
    with _lock_file(sqlite_path(url)), engine.connect() as connection:
        yield connection
        connection.commit()


@contextmanager
def _lock_file(path: Path | None) -> Iterator[None]:
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
