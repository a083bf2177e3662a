"""Engine/session factory and repository functions.

Repository functions take a session from the caller and return plain dataclasses, never ORM
objects, so callers (pages included) never meet a detached-instance error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy import create_engine, event, func, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from db.models import Base, Run, Step, TokenStat, utc_now

DEFAULT_DB_PATH = Path("data") / "speclens.db"


def database_url(url: str | None = None) -> str:
    """Explicit URL, else SPECLENS_DB_URL, else the SQLite file data/speclens.db."""
    return url or os.environ.get("SPECLENS_DB_URL") or f"sqlite:///{DEFAULT_DB_PATH}"


def make_engine(url: str | None = None) -> Engine:
    url = database_url(url)
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":
        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(connection, _record):
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")  # readers (the dashboard) never block the writer
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()
    Base.metadata.create_all(engine)
    return engine


def artifact_root(url: str | None = None) -> Path:
    """Where safetensors artifacts go: beside a SQLite file, else SPECLENS_ARTIFACT_DIR or data/artifacts."""
    url = database_url(url)
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return Path(url[len("sqlite:///"):]).parent / "artifacts"
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


@dataclass
class StepInfo:
    step_index: int
    position: int
    pending_token: int
    drafted_ids: list[int]
    accepted_count: int
    bonus_id: int
    committed_ids: list[int]
    target_argmax_ids: list[int]
    target_argmax_probs: list[float] = field(default_factory=list)
    draft_probs: list[float] = field(default_factory=list)
    draft_top_ids: list[list[int]] = field(default_factory=list)
    draft_top_probs: list[list[float]] = field(default_factory=list)
    tree_parents: list[int] | None = None
    draft_ms: float = 0.0
    verify_ms: float = 0.0


STEP_FIELDS = [f for f in StepInfo.__dataclass_fields__]


def _run_info(run: Run, step_count: int = 0) -> RunInfo:
    return RunInfo(run.id, run.kind, run.status, run.error, run.target_path, run.draft_path, run.sample_ref,
                   list(run.prompt_ids or []), dict(run.params or {}), list(run.aux_hf_indices or []),
                   list(run.output_ids or []), dict(run.metrics or {}), run.artifact_path, run.artifact_sha256,
                   run.created_at, run.finished_at, step_count)


# ---------------------------------------------------------------------------------- runs

def create_run(session: Session, *, kind: str, target_path: str, draft_path: str, params: dict,
               aux_hf_indices: list[int], prompt_ids: list[int] | None = None, sample_ref: str | None = None,
               sample_id: int | None = None) -> int:
    run = Run(kind=kind, status="running", target_path=target_path, draft_path=draft_path, params=params,
              aux_hf_indices=list(aux_hf_indices), prompt_ids=list(prompt_ids or []), sample_ref=sample_ref,
              sample_id=sample_id)
    session.add(run)
    session.flush()
    return run.id


def add_step(session: Session, run_id: int, step: StepInfo) -> None:
    session.add(Step(run_id=run_id, **{name: getattr(step, name) for name in STEP_FIELDS}))


def add_token_stats(session: Session, run_id: int, rows: list[dict]) -> None:
    if rows:  # bulk insert: thousands of small rows per run
        session.execute(insert(TokenStat), [{"run_id": run_id, **row} for row in rows])


def finish_run(session: Session, run_id: int, *, output_ids: list[int], metrics: dict,
               artifact_path: str | None = None, artifact_sha256: str | None = None) -> None:
    run = session.get(Run, run_id)
    run.status, run.output_ids, run.metrics = "finished", list(output_ids), metrics
    run.artifact_path, run.artifact_sha256, run.finished_at = artifact_path, artifact_sha256, utc_now()


def fail_run(session: Session, run_id: int, *, error: str, output_ids: list[int] | None = None,
             metrics: dict | None = None, status: str = "failed", artifact_path: str | None = None,
             artifact_sha256: str | None = None) -> None:
    run = session.get(Run, run_id)
    run.status, run.error, run.finished_at = status, error, utc_now()
    run.output_ids = list(output_ids or run.output_ids or [])
    run.metrics = metrics or run.metrics or {}
    run.artifact_path, run.artifact_sha256 = artifact_path, artifact_sha256


def get_run(session: Session, run_id: int) -> RunInfo | None:
    run = session.get(Run, run_id)
    if run is None:
        return None
    count = session.scalar(select(func.count()).select_from(Step).where(Step.run_id == run_id))
    return _run_info(run, count)


def list_runs(session: Session, limit: int = 100) -> list[RunInfo]:
    runs = session.scalars(select(Run).order_by(Run.id.desc()).limit(limit)).all()
    return [_run_info(run) for run in runs]


def get_steps(session: Session, run_id: int) -> list[StepInfo]:
    steps = session.scalars(select(Step).where(Step.run_id == run_id).order_by(Step.step_index)).all()
    return [StepInfo(**{name: getattr(step, name) for name in STEP_FIELDS}) for step in steps]


def delete_run(session: Session, run_id: int) -> bool:
    run = session.get(Run, run_id)
    if run is None:
        return False
    session.delete(run)
    return True
