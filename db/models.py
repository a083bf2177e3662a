"""Every ORM table of SpecLens (SQLAlchemy 2.0 typed style). Lists and dicts are JSON columns; text
from users or their files is unbounded Text (PostgreSQL enforces a VARCHAR length, SQLite does not).
A change here needs a revision in db/migrations/versions (tests/db/test_schema.py compares them)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utc_now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class Dataset(Base):
    __tablename__ = "datasets"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    path: Mapped[str | None] = mapped_column(Text)
    format: Mapped[str] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    samples: Mapped[list[SampleRow]] = relationship(back_populates="dataset", cascade="all, delete-orphan")


class SampleRow(Base):
    __tablename__ = "samples"
    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(Integer)  # order within the dataset
    line: Mapped[int | None] = mapped_column(Integer)  # line in the source file
    source: Mapped[str] = mapped_column(Text, default="")
    input_ids: Mapped[list] = mapped_column(JSON)
    loss_mask: Mapped[list] = mapped_column(JSON)
    prompt_len: Mapped[int] = mapped_column(Integer)
    seq_len: Mapped[int] = mapped_column(Integer)
    extra: Mapped[dict | None] = mapped_column(JSON, default=dict)  # text, feature_file, ... per format
    dataset: Mapped[Dataset] = relationship(back_populates="samples")


class Checkpoint(Base):
    __tablename__ = "checkpoints"
    id: Mapped[int] = mapped_column(primary_key=True)
    role: Mapped[str] = mapped_column(String(20))  # target | draft
    path: Mapped[str] = mapped_column(Text)
    config: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))  # replay | teacher
    status: Mapped[str] = mapped_column(String(20), default="running")  # running | finished | failed
    error: Mapped[str | None] = mapped_column(Text)
    target_path: Mapped[str] = mapped_column(Text)
    draft_path: Mapped[str] = mapped_column(Text)
    sample_id: Mapped[int | None] = mapped_column(ForeignKey("samples.id", ondelete="SET NULL"))
    sample_ref: Mapped[str | None] = mapped_column(Text)  # "file#index" or "prompt"
    prompt_ids: Mapped[list] = mapped_column(JSON, default=list)
    params: Mapped[dict] = mapped_column(JSON, default=dict)  # K, limits, device, dtype, wiring
    aux_hf_indices: Mapped[list] = mapped_column(JSON, default=list)
    output_ids: Mapped[list] = mapped_column(JSON, default=list)
    metrics: Mapped[dict] = mapped_column(JSON, default=dict)
    artifact_path: Mapped[str | None] = mapped_column(Text)
    artifact_sha256: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    finished_at: Mapped[datetime | None] = mapped_column()
    # The process writing a running run, and when it last wrote: a run whose writer is gone is
    # interrupted, not running (db/store.py reap_stale_runs).
    writer_host: Mapped[str | None] = mapped_column(String(255))
    writer_pid: Mapped[int | None] = mapped_column(Integer)
    heartbeat_at: Mapped[datetime | None] = mapped_column()
    steps: Mapped[list[Step]] = relationship(
        back_populates="run", cascade="all, delete-orphan", order_by="Step.step_index"
    )


class RunId(Base):
    """Every run id ever handed out on SQLite, whose plain INTEGER PRIMARY KEY gives a deleted largest
    id to the next row: this table's AUTOINCREMENT (sqlite_sequence) never goes back, so a run id
    means one run forever (db/runs.py next_run_id). PostgreSQL's runs.id sequence never goes back
    by itself; the table is there too (one schema) and stays empty."""

    __tablename__ = "run_ids"
    __table_args__ = {"sqlite_autoincrement": True}
    id: Mapped[int] = mapped_column(primary_key=True)


class Step(Base):
    __tablename__ = "steps"
    __table_args__ = (Index("ix_steps_run_step", "run_id", "step_index", unique=True),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    step_index: Mapped[int] = mapped_column(Integer)
    position: Mapped[int] = mapped_column(Integer)
    pending_token: Mapped[int] = mapped_column(Integer)
    drafted_ids: Mapped[list] = mapped_column(JSON)
    accepted_count: Mapped[int] = mapped_column(Integer)
    bonus_id: Mapped[int] = mapped_column(Integer)
    committed_ids: Mapped[list] = mapped_column(JSON)
    target_argmax_ids: Mapped[list] = mapped_column(JSON)
    target_argmax_probs: Mapped[list] = mapped_column(JSON, default=list)
    draft_probs: Mapped[list] = mapped_column(JSON, default=list)
    draft_top_ids: Mapped[list] = mapped_column(JSON, default=list)
    draft_top_probs: Mapped[list] = mapped_column(JSON, default=list)
    tree: Mapped[dict | None] = mapped_column(JSON)  # StepRecord.tree, a StepTree as JSON
    draft_ms: Mapped[float] = mapped_column(Float)
    verify_ms: Mapped[float] = mapped_column(Float)
    run: Mapped[Run] = relationship(back_populates="steps")


class TokenStat(Base):
    """Per position and per aux chunk summaries of the hidden states of a run."""

    __tablename__ = "token_stats"
    __table_args__ = (Index("ix_token_stats_run", "run_id", "position"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    chunk: Mapped[str] = mapped_column(
        String(40)
    )  # "hf<k>" for aux chunks, "draft_out" for the draft's hidden
    norm: Mapped[float] = mapped_column(Float)
    reference: Mapped[str | None] = mapped_column(Text)  # what the diff columns compare against
    cosine: Mapped[float | None] = mapped_column(Float)
    norm_ratio: Mapped[float | None] = mapped_column(Float)
    max_abs_diff: Mapped[float | None] = mapped_column(Float)
    relative_error: Mapped[float | None] = mapped_column(Float)


class ServingObservationRow(Base):
    """What a serving engine reported (backend/data/serving.py), stored beside the replays."""

    __tablename__ = "serving_observations"
    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    engine: Mapped[str] = mapped_column(String(20))
    version: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text)
    draft_path: Mapped[str | None] = mapped_column(Text)
    accept_length: Mapped[float | None] = mapped_column(Float)
    observation: Mapped[dict] = mapped_column(JSON, default=dict)  # the whole ServingObservation
    lint: Mapped[list] = mapped_column(JSON, default=list)


class WiringProbeRow(Base):
    """A finished wiring probe (backend/diagnostics/probe.py) of one draft on one target, kept so that a
    later server still knows what it found; `draft_stamp`: the draft's files as they were when it ran
    (a probe of a since-changed draft is not reused)."""

    __tablename__ = "wiring_probes"
    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    target_path: Mapped[str] = mapped_column(Text)
    draft_path: Mapped[str] = mapped_column(Text)
    draft_stamp: Mapped[list] = mapped_column(JSON, default=list)
    report: Mapped[dict] = mapped_column(JSON, default=dict)


class VerdictRow(Base):
    """A finished `diagnose` verdict (backend/diagnostics/diagnose.py) of one draft on one target, kept
    so that a reload or a later server shows it, labelled with when it ran; `draft_stamp` as for the
    probes (a verdict on a since-changed draft is not shown)."""

    __tablename__ = "verdicts"
    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    target_path: Mapped[str] = mapped_column(Text)
    draft_path: Mapped[str] = mapped_column(Text)
    draft_stamp: Mapped[list] = mapped_column(JSON, default=list)
    result: Mapped[dict] = mapped_column(JSON, default=dict)
