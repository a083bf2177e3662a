"""Datasets and their samples: stored (at once or streamed), listed, read, deleted."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from backend.data.samples import Sample
from db.connection import settle_after_commit
from db.models import Dataset, SampleRow

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
    settle_after_commit(session)
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
    settle_after_commit(session)
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


def sample_sources(session: Session, sample_ids) -> dict[int, str]:
    """Each sample's `source` field by id (ids no longer stored are left out)."""
    ids = sorted({i for i in sample_ids if i is not None})
    if not ids:
        return {}
    return dict(session.execute(select(SampleRow.id, SampleRow.source).where(SampleRow.id.in_(ids))).all())


def samples_digest(samples: Iterable, digest=None):
    """What makes two datasets the same: their samples' tokens, loss masks and prompt lengths, in order
    (anything with input_ids, loss_mask and prompt_len: a Sample or a stored row), as a hex string; given
    a running `digest` (hashlib), the samples are added to it and it is returned (a streamed import)."""
    running = digest if digest is not None else hashlib.sha256()
    for s in samples:
        running.update(json.dumps([list(s.input_ids), list(s.loss_mask), s.prompt_len]).encode())
    return running if digest is not None else running.hexdigest()


def same_dataset(session: Session, dataset_id: int, digest: str) -> int | None:
    """An older dataset of the same format and size whose samples have `digest` (samples_digest), else
    None: importing a file a second time finds the first import."""
    new = session.get(Dataset, dataset_id)
    count = func.count(SampleRow.id)
    sizes = select(SampleRow.dataset_id, count.label("n")).group_by(SampleRow.dataset_id).subquery()
    size = session.scalar(select(sizes.c.n).where(sizes.c.dataset_id == dataset_id))
    query = (
        select(Dataset.id)
        .join(sizes, sizes.c.dataset_id == Dataset.id)
        .where(Dataset.id != dataset_id, Dataset.format == new.format, sizes.c.n == size)
        .order_by(Dataset.id)
    )
    for other in session.scalars(query).all():
        rows = session.scalars(
            select(SampleRow).where(SampleRow.dataset_id == other).order_by(SampleRow.index)
        )
        if samples_digest(rows) == digest:
            return other
    return None


def sample_tokens(session: Session, sample_ids) -> dict[int, tuple[list[int], int]]:
    """Each sample's (input_ids, prompt_len) by id (ids no longer stored are left out)."""
    ids = sorted({i for i in sample_ids if i is not None})
    if not ids:
        return {}
    query = select(SampleRow.id, SampleRow.input_ids, SampleRow.prompt_len).where(SampleRow.id.in_(ids))
    return {row.id: (list(row.input_ids), row.prompt_len) for row in session.execute(query)}


def sample_datasets(session: Session, sample_ids) -> dict[int, int]:
    """Each sample's dataset id by sample id (ids no longer stored are left out)."""
    ids = sorted({i for i in sample_ids if i is not None})
    if not ids:
        return {}
    return dict(
        session.execute(select(SampleRow.id, SampleRow.dataset_id).where(SampleRow.id.in_(ids))).all()
    )


def get_samples(session: Session, dataset_id: int, limit: int | None = None) -> list[Sample]:
    """The dataset's samples in order; the first `limit` only when given."""
    query = select(SampleRow).where(SampleRow.dataset_id == dataset_id).order_by(SampleRow.index)
    rows = session.scalars(query if limit is None else query.limit(limit))
    return [_sample_info(row) for row in rows]
