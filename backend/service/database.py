"""The database a request writes to: one engine and session factory per URL, opened once per process."""

from __future__ import annotations

import errno
import functools
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import sessionmaker

from backend import BadInput, first_line
from db import schema, store


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
        from backend.service.run_tensors import (
            recover_artifact,  # torch, only when there is something to merge
        )

        for run_id in reaped:
            artifact = recover_artifact(database.artifact_dir, run_id)
            if artifact["artifact_path"]:
                with store.session_scope(database.factory) as session:
                    store.set_artifact(session, run_id, **artifact)
    return reaped


def database_url(url: str | None = None) -> str:
    return store.database_url(url)


def existing_store(url: str | None = None) -> str | None:
    """The database URL when there is a store to read (an SQLite file that does not exist yet: None),
    for commands that only read what is stored (the lint) and must not create one."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from backend import BadInput

    resolved = database_url(url)
    try:
        parsed = make_url(resolved)
    except ArgumentError as error:
        raise BadInput(f"{resolved}: not a database URL ({error})") from None
    if parsed.get_backend_name() == "sqlite" and not (parsed.database and Path(parsed.database).is_file()):
        return None
    return resolved


# a disk that refuses a write (full, over quota, a file-size limit, mounted read-only): the
# environment's fault, reported in one line as bad input, never as an internal error
DISK_REFUSED = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
# a path the user gave that cannot be read or written as asked: their input, said in one line
PATH_REFUSED = frozenset(
    {errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG}
)


def refusal(error: BaseException, url: str | None = None) -> str | None:
    """The one line for an error the database or the disk raised (the CLI's exit 2, the page's
    message), with what the code that saw it added (e.g. that the run could not be marked); None
    for any other error. `url` is the database the command used (default: the configured one)."""
    notes = "".join(f"; {note}" for note in getattr(error, "__notes__", ()))
    if isinstance(error, SQLAlchemyError):
        reason = str(getattr(error, "orig", None) or error).strip().splitlines() or [type(error).__name__]
        return f"database {url or database_url()}: {reason[0]}{notes}"
    if isinstance(error, OSError) and (
        error.errno in DISK_REFUSED or (error.errno in PATH_REFUSED and error.filename)
    ):
        return f"{error.filename or 'a file'}: {error.strerror}{notes}"
    if isinstance(error, RecursionError):  # json and the parsers recurse per nesting level
        return f"the input is nested too deeply to read ({first_line(error)}){notes}"
    return None


def refused_in_one_line(function):
    """A service function that writes the store, called with the database URL first: a refusal of the
    database or the disk (a read-only store, a full disk: `refusal`) reaches its caller as BadInput in
    one line naming the database, as the CLI says it, never as a driver's traceback on a page."""

    @functools.wraps(function)
    def guarded(db_url, *args, **kwargs):
        try:
            return function(db_url, *args, **kwargs)
        except (SQLAlchemyError, OSError, RecursionError) as error:
            said = refusal(error, database_url(db_url))
            if said is None:
                raise
            raise BadInput(said) from None

    return guarded


def write_problem(url: str | None = None) -> str | None:
    """Why this process cannot write the store at `url`, said before anything is tried (the sidebar):
    a SQLite file or folder it may not write, or one opened read-only; None when nothing says so (a
    server's permissions show only when a write is refused)."""
    resolved = database_url(url)
    if schema.sqlite_path(resolved) is None:
        return None
    if schema.read_only(resolved) or "mode=ro" in resolved or "immutable=1" in resolved:
        return (
            f"database {schema.display_name(resolved)} is read-only here: runs, imports and deletes are "
            "refused; point SPECLENS_DB_URL at a file you can write to keep new work"
        )
    return None
