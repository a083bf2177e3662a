"""Stored runs for the pages and the CLI: list, read, delete, export, hidden-state rows."""

from __future__ import annotations

import json
import shutil
from functools import lru_cache
from pathlib import Path

from sqlalchemy import select

from backend import BadInput
from backend.run.records import StepRecord
from backend.run.request import ReplayRequest
from backend.service.database import open_database, reap, refused_in_one_line
from db import store
from db.export import ExportError, export_bytes, export_run
from db.models import Run

RunInfo = store.RunInfo


def list_runs(db_url: str | None, limit: int = 500) -> list[RunInfo]:
    database = open_database(db_url)
    reap(database)  # a run whose writer died is shown as interrupted, never as running
    with store.session_scope(database.factory) as session:
        return store.list_runs(session, limit=limit)


def get_run(db_url: str | None, run_id: int) -> RunInfo | None:
    database = open_database(db_url)
    reap(database)
    with store.session_scope(database.factory) as session:
        return store.get_run(session, run_id)


def find_finished_run(
    db_url: str | None, request: ReplayRequest, device: str | None = None, dtype: str | None = None
) -> RunInfo | None:
    """The newest finished replay of the same target, draft and prompt whose request decides the
    same (`ReplayRequest.decides`), one of the same sample first; None when there is none.
    `device` and `dtype` are the ones the request would run on (None: any), matched against what the
    run resolved; a recorded request needs a recorded run."""
    if request.prompt_ids is None:
        return None  # a text prompt's ids depend on the tokenizer: replay it
    prompt = list(request.prompt_ids)

    def variants(path: str) -> list[str]:
        return sorted({path, str(Path(path).resolve())})

    database = open_database(db_url)
    reap(database)
    with store.session_scope(database.factory) as session:
        candidates = session.scalars(
            select(Run)
            .where(
                Run.kind == "replay",
                Run.status == "finished",
                Run.target_path.in_(variants(request.target)),
                Run.draft_path.in_(variants(request.draft)),
            )
            .order_by(Run.id.desc())
        ).all()
        stored = [store.run_info(run) for run in candidates if list(run.prompt_ids or []) == prompt]
        matches = [
            run
            for run in stored
            if run.request is not None
            and run.request.decides == request.decides
            and (device is None or run.resolved.device == device)
            and (dtype is None or run.resolved.dtype == dtype)
            and (run.request.record or not request.record)
        ]
        if not matches:
            return None
        same_sample = [run for run in matches if run.sample_id == request.sample_id]
        return store.get_run(session, (same_sample or matches)[0].id)  # with its step count


def get_run_with_steps(db_url: str | None, run_id: int) -> tuple[RunInfo | None, list[StepRecord]]:
    with store.session_scope(open_database(db_url).factory) as session:
        run = store.get_run(session, run_id)
        return run, store.get_steps(session, run_id) if run else []


@refused_in_one_line
def delete_run(db_url: str | None, run_id: int) -> bool:
    """Delete a run and its files (its artifact folder: hidden states, part files); BadInput while it
    is still recording, or when its files could not be removed (the row is gone then: say where they
    are). Its id is never handed out again (db/runs.py next_run_id)."""
    database = open_database(db_url)
    try:
        with store.session_scope(database.factory) as session:
            deleted = store.delete_run(session, run_id)
    except store.RunBusy as busy:
        raise BadInput(str(busy)) from None
    folder = database.artifact_dir / str(run_id) if database.artifact_dir is not None else None
    if deleted and folder is not None and folder.is_dir():
        try:
            shutil.rmtree(folder)
        except OSError as error:
            raise BadInput(
                f"run {run_id} deleted, but its files in {folder} were not removed ({error.strerror})"
            ) from None
    return deleted


def token_stats(db_url: str | None, run_id: int, reference: str | None = None) -> list[dict]:
    with store.session_scope(open_database(db_url).factory) as session:
        return store.get_token_stats(session, run_id, reference)


def token_stat_references(db_url: str | None, run_id: int) -> list[str]:
    with store.session_scope(open_database(db_url).factory) as session:
        return store.token_stat_references(session, run_id)


def prompt_texts(runs: list[RunInfo]) -> dict[int, str]:
    """Each run's prompt as text with its target's tokenizer (ids where the target has none): what the
    Runs page searches, and how it labels a typed prompt."""
    texts = {}
    for run in runs:
        text = token_text(run.target_path)
        texts[run.id] = text(run.prompt_ids) if text else " ".join(map(str, run.prompt_ids))
    return texts


def file_sample_sources(runs: list[RunInfo]) -> dict[int, str]:
    """Each run's sample source read from its samples file, for the runs whose sample_ref names a
    record of one ("path#index": `replay --samples --index`, `evaluate`; the store has no source for
    them): what the Runs page searches and labels them by. A run list holds hundreds of runs of one
    file, so each file is read once (file_sample_source's cache) and each target's vocab read once."""
    vocab_sizes: dict[str, int | None] = {}
    found = {}
    for run in runs:
        if "#" not in (run.sample_ref or ""):
            continue
        if run.target_path not in vocab_sizes:
            vocab_sizes[run.target_path] = target_vocab_size(run.target_path)
        source = file_sample_source(run.sample_ref, vocab_sizes[run.target_path])
        if source:
            found[run.id] = source
    return found


def file_sample_source(sample_ref: str | None, vocab_size: int | None = None) -> str | None:
    """The `source` field of the samples file record a run names as "path#index" (the index-th valid
    record for the target's vocab, as `replay --index` and `evaluate` count them); "" for a record
    without one; None for another ref, or a file (or index) that cannot be read now: a label only,
    never an error. One place for the Runs page and the Where-lost page (service/where_lost.py _source_of)."""
    path, _, index = (sample_ref or "").rpartition("#")
    if not path or not index.isdigit():
        return None
    found = _file_sources(path, _stamp(path), vocab_size)
    return found[int(index)] if found is not None and int(index) < len(found) else None


def target_vocab_size(target_path: str) -> int | None:
    """The target's vocab size from its config.json (no transformers: this module is torch-free)."""
    try:
        config = json.loads((Path(target_path) / "config.json").read_text(encoding="utf-8"))
        size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    return size if isinstance(size, int) and size > 0 else None


def _stamp(path: str) -> float | None:
    try:
        return Path(path).stat().st_mtime
    except OSError:
        return None


@lru_cache(maxsize=16)
def _file_sources(path: str, _stamp: float | None, vocab_size: int | None = None) -> tuple[str, ...] | None:
    """The `source` field of each valid record of a training JSONL file (valid for the target's vocab,
    as `evaluate` and `replay --index` count them), read one line at a time; None for another format,
    or a file that cannot be read now. Keyed by the file's mtime, so an edited file is read again."""
    from backend.data.samples import iter_jsonl

    if not path.endswith(".jsonl"):
        return None
    try:
        return tuple(s.source or "" for s in iter_jsonl(path, vocab_size, []))
    except (BadInput, OSError):
        return None


@lru_cache(maxsize=8)
def token_text(target_path: str):
    """ids -> text with the target's tokenizer.json (the `tokenizers` library, no torch); None when the
    target has none (or is gone): the export then has ids only."""
    from tokenizers import Tokenizer

    path = Path(target_path) / "tokenizer.json"
    try:
        tokenizer = Tokenizer.from_file(str(path)) if path.is_file() else None
    except Exception:  # noqa: BLE001 - an unreadable tokenizer leaves the export with ids only
        return None
    if tokenizer is None:
        return None
    return lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False)


def run_file(run: RunInfo, steps: list[StepRecord], format: str) -> bytes:
    """The run as CSV, JSON or Parquet bytes (the dashboard's download buttons)."""
    return export_bytes(run, steps, format, token_text(run.target_path))


def export(db_url: str | None, run_id: int, format: str, out: str | Path) -> Path:
    try:
        return export_run(open_database(db_url).factory, run_id, format, out, token_text)
    except ExportError as error:
        raise BadInput(str(error)) from error
