"""Runs: created, written step by step (or in batches while recording), finished, read, deleted.

Repository functions take a session from the caller and return plain dataclasses, never ORM
objects, so callers (pages included) never meet a detached-instance error."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from backend.run.metrics import RunMetrics
from backend.run.records import STORED_STEP_FIELDS, StepRecord, stored_fields, stored_step
from backend.run.request import ReplayRequest
from backend.run.run_value import Resolved, asked_settings, read_params
from db.connection import checkpoint, session_scope, settle_after_commit
from db.models import Run, RunId, Step, TokenStat, utc_now

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

    @cached_property
    def request(self) -> ReplayRequest | None:
        """The request this run answered, typed (`params` is the stored dict, kept whole for export)."""
        asked = asked_settings(self.params or {})
        return ReplayRequest.stored(
            self.target_path, self.draft_path, self.prompt_ids, self.sample_ref, self.sample_id, asked
        )

    @cached_property
    def measured(self) -> RunMetrics:
        """Its metrics, typed (`metrics` is the stored dict, kept whole for export and --json)."""
        return RunMetrics.from_stored(self.metrics)

    @cached_property
    def resolved(self) -> Resolved:
        """What the loaded pair made of that request: reading, wiring, effective shape, device, dtype."""
        return read_params(self.params)


def run_info(run: Run, step_count: int = 0) -> RunInfo:
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
        id=next_run_id(session),
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


def next_run_id(session: Session) -> int | None:
    """A run id never given before, in the caller's transaction (None: the database's own sequence
    decides, PostgreSQL's, which never goes back). On SQLite: the next of `run_ids`' AUTOINCREMENT, and
    past the largest run id there is (a run written without it), which the sequence then keeps."""
    if session.get_bind().dialect.name != "sqlite":
        return None
    given = session.execute(insert(RunId.__table__)).inserted_primary_key[0]
    largest = session.scalar(select(func.max(Run.id))) or 0
    if given <= largest:
        given = largest + 1
        session.execute(insert(RunId.__table__).values(id=given))
    session.execute(delete(RunId.__table__))  # sqlite_sequence keeps the largest
    return given


def add_steps(session: Session, run_id: int, steps: list[StepRecord]) -> None:
    """Bulk insert: one plain statement for a batch of steps (the one place steps are written)."""
    if steps:
        session.execute(
            insert(Step.__table__),
            [{"run_id": run_id, **stored_fields(s)} for s in steps],
        )


def add_token_stats(session: Session, run_id: int, rows: list[dict]) -> None:
    """Bulk insert: thousands of small rows per run (the one place token stats are written)."""
    if rows:
        session.execute(insert(TokenStat.__table__), [{"run_id": run_id, **row} for row in rows])


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
    settle_after_commit(session)
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
    settle_after_commit(session)
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
    checkpoint(factory.kw["bind"], "RESTART")  # the update below may still fit in the log as it is
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
    return run_info(run, count)


def list_runs(session: Session, limit: int = 100) -> list[RunInfo]:
    runs = session.scalars(select(Run).order_by(Run.id.desc()).limit(limit)).all()
    counts = dict(
        session.execute(
            select(Step.run_id, func.count())
            .where(Step.run_id.in_([r.id for r in runs]))
            .group_by(Step.run_id)
        ).all()
    )
    return [run_info(run, counts.get(run.id, 0)) for run in runs]


def get_steps(session: Session, run_id: int) -> list[StepRecord]:
    steps = session.scalars(select(Step).where(Step.run_id == run_id).order_by(Step.step_index)).all()
    return [stored_step({name: getattr(step, name) for name in STORED_STEP_FIELDS}) for step in steps]


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
    settle_after_commit(session)
    return True


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
    FOR UPDATE does), then the steps and token stats through `add_steps` and `add_token_stats`.
    False, with nothing written, when the run is gone (deleted while it recorded)."""
    from sqlalchemy import update

    values: dict = {"heartbeat_at": utc_now()}
    if output_ids is not None:
        values["output_ids"] = list(output_ids)
    runs = Run.__table__
    if session.execute(update(runs).where(runs.c.id == run_id).values(values)).rowcount == 0:
        return False
    add_steps(session, run_id, steps)
    add_token_stats(session, run_id, token_stats)
    return True
