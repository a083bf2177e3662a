"""Engine/session factory and repository functions.

Repository functions take a session from the caller and return plain dataclasses, never ORM
objects, so callers (pages included) never meet a detached-instance error.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import create_engine, delete, event, func, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from backend import BadInput
from backend.data.samples import Sample
from backend.engine.records import STORED_STEP_FIELDS, StepRecord
from db import schema
from db.models import Checkpoint, Dataset, Run, SampleRow, ServingObservationRow, Step, TokenStat, utc_now

DEFAULT_DB_PATH = Path("data") / "speclens.db"


def database_url(url: str | None = None) -> str:
    """Explicit URL, else SPECLENS_DB_URL, else the SQLite file data/speclens.db."""
    return url or os.environ.get("SPECLENS_DB_URL") or f"sqlite:///{DEFAULT_DB_PATH}"


def make_engine(url: str | None = None) -> Engine:
    """An engine on `url` with its schema created or upgraded (db/schema.py). SQLite: WAL, foreign
    keys, writers wait for each other. PostgreSQL (psycopg 3): connections checked before use (a
    shared server restarts), JSON written strictly (PostgreSQL refuses NaN and Infinity)."""
    url = database_url(url)
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        Path(url[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
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

    schema.prepare(engine, url)
    return engine


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
        session.close()


# ------------------------------------------------------------------------------ dataclasses


@dataclass
class RunInfo:
    id: int
    kind: str
    status: str
    error: str | None
    target_path: str
    draft_path: str
    sample_ref: str | None
    prompt_ids: list[int]
    params: dict
    aux_hf_indices: list[int]
    output_ids: list[int]
    metrics: dict
    artifact_path: str | None
    artifact_sha256: str | None
    created_at: datetime
    finished_at: datetime | None
    step_count: int = 0
    sample_id: int | None = None
    heartbeat_at: datetime | None = None  # the writer's last write (running runs)


def _run_info(run: Run, step_count: int = 0) -> RunInfo:
    return RunInfo(
        run.id,
        run.kind,
        run.status,
        run.error,
        run.target_path,
        run.draft_path,
        run.sample_ref,
        list(run.prompt_ids or []),
        dict(run.params or {}),
        list(run.aux_hf_indices or []),
        list(run.output_ids or []),
        dict(run.metrics or {}),
        run.artifact_path,
        run.artifact_sha256,
        run.created_at,
        run.finished_at,
        step_count,
        run.sample_id,
        run.heartbeat_at,
    )


# ---------------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class RunInput:
    """What a run replays: the prompt's token ids and, when it came from a dataset or a typed prompt,
    the sample's reference (a label) and row id."""

    prompt_ids: list[int]
    sample_ref: str | None = None
    sample_id: int | None = None


NO_INPUT = RunInput([])


def create_run(
    session: Session,
    *,
    kind: str,
    target_path: str,
    draft_path: str,
    params: dict,
    aux_hf_indices: list[int],
    given: RunInput = NO_INPUT,
) -> int:
    run = Run(
        kind=kind,
        status="running",
        writer_host=socket.gethostname(),
        writer_pid=os.getpid(),
        heartbeat_at=utc_now(),
        target_path=target_path,
        draft_path=draft_path,
        params=params,
        aux_hf_indices=list(aux_hf_indices),
        prompt_ids=list(given.prompt_ids),
        sample_ref=given.sample_ref,
        sample_id=given.sample_id,
    )
    session.add(run)
    session.flush()
    return run.id


def add_steps(session: Session, run_id: int, steps: list[StepRecord]) -> None:
    """Bulk insert: one statement for a batch of steps."""
    if steps:
        session.execute(
            insert(Step),
            [{"run_id": run_id, **{n: getattr(s, n) for n in STORED_STEP_FIELDS}} for s in steps],
        )


def add_token_stats(session: Session, run_id: int, rows: list[dict]) -> None:
    if rows:  # bulk insert: thousands of small rows per run
        session.execute(insert(TokenStat), [{"run_id": run_id, **row} for row in rows])


STALE_AFTER_S = 600  # a run whose writer (on another host) has not written for this long is gone


def _writer_alive(run: Run, now: datetime, stale_after_s: float) -> bool:
    if run.writer_host == socket.gethostname() and run.writer_pid:
        try:
            os.kill(run.writer_pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # someone else's live process
        return True
    beat = run.heartbeat_at or run.created_at
    return beat is not None and (now - beat).total_seconds() < stale_after_s


def reap_stale_runs(session: Session, stale_after_s: float = STALE_AFTER_S) -> list[int]:
    """Mark running runs whose writer is gone as interrupted (their steps and partial output stay).
    On this host the writer's pid decides; elsewhere its heartbeat's age. Returns the run ids."""
    now, reaped = utc_now(), []
    for run in session.scalars(select(Run).where(Run.status == "running")).all():
        if _writer_alive(run, now, stale_after_s):
            continue
        steps = session.scalar(select(func.count()).select_from(Step).where(Step.run_id == run.id))
        run.status, run.finished_at = "interrupted", now
        run.error = (
            f"interrupted: its writer (host {run.writer_host or '?'}, pid {run.writer_pid or '?'}) is gone; "
            f"the {steps} steps it committed and its partial output are kept"
        )
        reaped.append(run.id)
    return reaped


def _locked_run(session: Session, run_id: int) -> Run | None:
    """The run, its row locked until the caller's transaction ends (SELECT ... FOR UPDATE on
    PostgreSQL): a concurrent delete_run waits for the writer's batch to commit, or the writer finds
    the run gone, instead of a foreign-key error or a lost update. SQLite ignores it (its writers
    are serialised by the database lock)."""
    return session.get(Run, run_id, with_for_update=True)


def set_artifact(session: Session, run_id: int, artifact_path: str, artifact_sha256: str) -> None:
    run = _locked_run(session, run_id)
    if run is not None:
        run.artifact_path, run.artifact_sha256 = artifact_path, artifact_sha256


def finish_run(
    session: Session,
    run_id: int,
    *,
    output_ids: list[int],
    metrics: dict,
    artifact_path: str | None = None,
    artifact_sha256: str | None = None,
) -> None:
    run = _locked_run(session, run_id)
    if run is None:
        raise RunGone(run_id)
    run.status, run.output_ids, run.metrics = "finished", list(output_ids), metrics
    run.artifact_path, run.artifact_sha256, run.finished_at = artifact_path, artifact_sha256, utc_now()


def fail_run(
    session: Session,
    run_id: int,
    *,
    error: str,
    output_ids: list[int] | None = None,
    metrics: dict | None = None,
    status: str = "failed",
    artifact_path: str | None = None,
    artifact_sha256: str | None = None,
) -> None:
    run = _locked_run(session, run_id)
    if run is None:
        return  # deleted while it ran: nothing to mark
    run.status, run.error, run.finished_at = status, error, utc_now()
    run.output_ids = list(output_ids or run.output_ids or [])
    run.metrics = metrics or run.metrics or {}
    run.artifact_path, run.artifact_sha256 = artifact_path, artifact_sha256


def mark_run_in_place(factory: sessionmaker, run_id: int, *, status: str, error: str) -> None:
    """The run's status, reason and end time, and nothing else: what can still be written when the
    full `fail_run` cannot (a full disk, a file-size limit). On SQLite the write-ahead log is first
    checkpointed and restarted (best effort: the database file may have no room for it either), so
    the update can reuse the log's existing pages instead of growing it; the row changes by a few
    bytes. Raises when even this cannot be written."""
    engine = factory.kw["bind"]
    if engine.dialect.name == "sqlite":
        try:
            with engine.connect() as connection:
                connection.exec_driver_sql("PRAGMA wal_checkpoint(RESTART)")
        except DBAPIError:
            pass  # the update below may still fit in the log as it is
    with session_scope(factory) as session:
        session.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(status=status, error=error[:500], finished_at=utc_now())
        )


def get_run(session: Session, run_id: int) -> RunInfo | None:
    run = session.get(Run, run_id)
    if run is None:
        return None
    count = session.scalar(select(func.count()).select_from(Step).where(Step.run_id == run_id))
    return _run_info(run, count)


def list_runs(session: Session, limit: int = 100) -> list[RunInfo]:
    runs = session.scalars(select(Run).order_by(Run.id.desc()).limit(limit)).all()
    counts = dict(
        session.execute(
            select(Step.run_id, func.count())
            .where(Step.run_id.in_([r.id for r in runs]))
            .group_by(Step.run_id)
        ).all()
    )
    return [_run_info(run, counts.get(run.id, 0)) for run in runs]


def get_steps(session: Session, run_id: int) -> list[StepRecord]:
    steps = session.scalars(select(Step).where(Step.run_id == run_id).order_by(Step.step_index)).all()
    return [StepRecord(**{name: getattr(step, name) for name in STORED_STEP_FIELDS}) for step in steps]


class RunGone(LookupError):
    """The run was deleted while its writer still recorded it."""

    def __init__(self, run_id: int):
        super().__init__(f"run {run_id} was deleted while it was recording; the replay stopped")
        self.run_id = run_id


class RunBusy(RuntimeError):
    pass


def delete_run(session: Session, run_id: int, force: bool = False) -> bool:
    """Delete a run and its steps. A run still recording (its writer alive) is refused unless
    forced: RunBusy."""
    run = session.get(Run, run_id)
    if run is None:
        return False
    if run.status == "running" and not force and _writer_alive(run, utc_now(), STALE_AFTER_S):
        raise RunBusy(
            f"run {run_id} is still recording (pid {run.writer_pid} on {run.writer_host}); "
            "stop it first, or delete it once it has ended"
        )
    session.delete(run)
    return True


# ------------------------------------------------------------------------------ datasets


@dataclass
class DatasetInfo:
    id: int
    name: str
    path: str | None
    format: str
    created_at: datetime
    sample_count: int = 0


def create_dataset(
    session: Session, *, name: str, path: str | None, format: str, samples: Iterable[Sample]
) -> int:
    """The dataset and all its samples in the caller's transaction: all land or none."""
    return create_dataset_streaming(session, name=name, path=path, format=format, samples=samples)[0]


def create_dataset_streaming(
    session: Session, *, name: str, path: str | None, format: str, samples: Iterable[Sample], batch: int = 256
) -> tuple[int, int]:
    """(dataset id, samples stored): the samples are inserted in batches as the iterator yields
    them, inside the caller's one transaction (all land or none; memory: one batch)."""
    dataset = Dataset(name=name, path=path, format=format)
    session.add(dataset)
    session.flush()
    rows, count = [], 0
    for s in samples:
        rows.append(
            {
                "dataset_id": dataset.id,
                "index": count,
                "line": s.line,
                "source": s.source or "",
                "input_ids": list(s.input_ids),
                "loss_mask": list(s.loss_mask),
                "prompt_len": s.prompt_len,
                "seq_len": len(s.input_ids),
                "extra": dict(s.extra or {}),
            }
        )
        count += 1
        if len(rows) >= batch:
            session.execute(insert(SampleRow), rows)
            rows = []
    if rows:
        session.execute(insert(SampleRow), rows)
    return dataset.id, count


def delete_dataset(session: Session, dataset_id: int) -> str | None:
    """Delete a dataset and its samples (runs keep their prompts; their sample link is cleared).
    Returns the dataset's source path, or None when there was no such dataset."""
    dataset = session.get(Dataset, dataset_id)
    if dataset is None:
        return None
    path = dataset.path or ""
    session.delete(dataset)
    return path


def list_datasets(session: Session) -> list[DatasetInfo]:
    counts = dict(
        session.execute(select(SampleRow.dataset_id, func.count()).group_by(SampleRow.dataset_id)).all()
    )
    rows = session.scalars(select(Dataset).order_by(Dataset.id)).all()
    return [DatasetInfo(d.id, d.name, d.path, d.format, d.created_at, counts.get(d.id, 0)) for d in rows]


def _sample_info(row: SampleRow) -> Sample:
    return Sample(
        list(row.input_ids),
        list(row.loss_mask),
        row.prompt_len,
        row.source,
        row.line,
        dict(row.extra or {}),
        row.id,
        row.dataset_id,
        row.index,
    )


def get_samples(session: Session, dataset_id: int, limit: int | None = None) -> list[Sample]:
    """The dataset's samples in order; the first `limit` only when given."""
    query = select(SampleRow).where(SampleRow.dataset_id == dataset_id).order_by(SampleRow.index)
    rows = session.scalars(query if limit is None else query.limit(limit))
    return [_sample_info(row) for row in rows]


def get_token_stats(session: Session, run_id: int, reference: str | None = None) -> list[dict]:
    """Per position and chunk rows; reference None = the fed features' own norms."""
    query = select(TokenStat).where(TokenStat.run_id == run_id)
    query = query.where(
        TokenStat.reference.is_(None) if reference is None else TokenStat.reference == reference
    )
    columns = (
        "position",
        "chunk",
        "norm",
        "reference",
        "cosine",
        "norm_ratio",
        "max_abs_diff",
        "relative_error",
    )
    return [
        {c: getattr(row, c) for c in columns}
        for row in session.scalars(query.order_by(TokenStat.position, TokenStat.id))
    ]


def token_stat_references(session: Session, run_id: int) -> list[str]:
    query = (
        select(TokenStat.reference)
        .where(TokenStat.run_id == run_id, TokenStat.reference.is_not(None))
        .distinct()
    )
    return sorted(session.scalars(query).all())


def delete_token_stats(session: Session, run_id: int, reference: str) -> None:
    session.execute(delete(TokenStat).where(TokenStat.run_id == run_id, TokenStat.reference == reference))


# ------------------------------------------------------------------------ serving observations


def add_observation(session: Session, observation: dict, draft_path: str | None, lint: list) -> int:
    row = ServingObservationRow(
        engine=observation["engine"],
        version=observation.get("version"),
        source=observation["source"],
        draft_path=draft_path,
        accept_length=observation.get("accept_length"),
        observation=observation,
        lint=lint,
    )
    session.add(row)
    session.flush()
    return row.id


def list_observations(session: Session, limit: int = 100) -> list[dict]:
    rows = session.scalars(
        select(ServingObservationRow).order_by(ServingObservationRow.id.desc()).limit(limit)
    )
    return [
        {
            "id": r.id,
            "created_at": r.created_at,
            "draft_path": r.draft_path,
            "lint": list(r.lint or []),
            **dict(r.observation or {}),
        }
        for r in rows
    ]


# ---------------------------------------------------------------- batched writes of a recording run


def write_run_batch(
    session: Session,
    run_id: int,
    steps: list[StepRecord],
    token_stats: list[dict],
    output_ids: list[int] | None = None,
) -> bool:
    """One batch of a recording run, in the caller's transaction, as plain SQL statements (no ORM
    objects: a fast replay writes dozens of batches a second): the run's heartbeat and partial
    output first, an UPDATE that also locks its row until the commit (as `_locked_run`'s SELECT ...
    FOR UPDATE does), then the steps and token stats as bulk inserts. Stores what `add_steps` and
    `add_token_stats` store. False, with nothing written, when the run is gone (deleted while it
    recorded)."""
    from sqlalchemy import update

    values: dict = {"heartbeat_at": utc_now()}
    if output_ids is not None:
        values["output_ids"] = list(output_ids)
    runs = Run.__table__
    if session.execute(update(runs).where(runs.c.id == run_id).values(values)).rowcount == 0:
        return False
    if steps:
        session.execute(
            insert(Step.__table__),
            [{"run_id": run_id, **{n: getattr(s, n) for n in STORED_STEP_FIELDS}} for s in steps],
        )
    if token_stats:
        session.execute(insert(TokenStat.__table__), [{"run_id": run_id, **row} for row in token_stats])
    return True


# --------------------------------------------------------------------------- remembered checkpoints


def remember_checkpoint(session: Session, role: str, path: str, name: str) -> None:
    """A target or draft directory the user added (the dashboard's sidebar), kept across reloads.
    Adding a path again renames it; nothing is duplicated."""
    row = session.scalars(select(Checkpoint).where(Checkpoint.role == role, Checkpoint.path == path)).first()
    if row is None:
        session.add(Checkpoint(role=role, path=path, config={"name": name}))
    else:
        row.config = {**(row.config or {}), "name": name}
        row.created_at = utc_now()  # the latest added is the one a reload selects


def remembered_checkpoints(session: Session, role: str) -> list[tuple[str, str]]:
    """(name, path) of the directories added for `role`, oldest first."""
    rows = session.scalars(
        select(Checkpoint).where(Checkpoint.role == role).order_by(Checkpoint.created_at, Checkpoint.id)
    )
    return [((r.config or {}).get("name") or Path(r.path).name or r.path, r.path) for r in rows]
