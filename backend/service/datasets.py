"""Datasets in the store: import a file (validated by backend.data), list them, read their samples."""

from __future__ import annotations

from pathlib import Path

from backend import BadInput
from backend.data.importer import ImportResult, stream_dataset
from backend.data.samples import Sample
from backend.defaults import DEMO_EVAL
from backend.service.database import open_database
from db import store

DatasetInfo = store.DatasetInfo


def target_vocabulary(target_path: str | None):
    """(tokenizer, vocab size) of a target directory for imports; (None, None) when no target is
    named. A named target that cannot be read is refused: every id must be checked against it."""
    if not target_path:
        return None, None
    if not Path(target_path, "config.json").is_file():
        raise BadInput(
            f"target {target_path}: not a model directory (no config.json); the import checks every id "
            "against the target's vocabulary"
        )
    from backend.engine.loading import load_tokenizer, read_target_config

    return load_tokenizer(target_path), read_target_config(target_path).vocab_size


def import_dataset(
    db_url: str | None,
    path: str | Path,
    name: str | None = None,
    target_path: str | None = None,
    format: str | None = None,
) -> tuple[int, ImportResult]:
    """Validate and store; the dataset and its good samples land in one transaction. A file with no
    good record is refused (BadInput) and nothing is stored."""
    tokenizer, vocab_size = target_vocabulary(target_path)
    format, samples, rejected = stream_dataset(path, tokenizer, vocab_size, format)
    with store.session_scope(open_database(db_url).factory) as session:
        dataset_id, count = store.create_dataset_streaming(
            session, name=name or Path(path).name, path=str(path), format=format, samples=samples
        )
        if not count:  # raising here rolls the dataset back: nothing is stored
            reasons = "; ".join(f"line {r.line}: {r.reason}" for r in rejected[:3])
            raise BadInput(f"{path}: no valid record" + (f" ({reasons})" if reasons else " (empty file)"))
    return dataset_id, ImportResult(format, [], rejected, imported=count)


def ensure_demo_dataset(db_url: str | None) -> int | None:
    """On a fresh database register the bundled demo's eval set as the first dataset."""
    with store.session_scope(open_database(db_url).factory) as session:
        if store.list_datasets(session) or not DEMO_EVAL.is_file():
            return None
    dataset_id, _ = import_dataset(db_url, DEMO_EVAL, name="demo eval (bundled)", format="jsonl")
    return dataset_id


def list_datasets(db_url: str | None) -> list[DatasetInfo]:
    with store.session_scope(open_database(db_url).factory) as session:
        return store.list_datasets(session)


def get_samples(db_url: str | None, dataset_id: int) -> list[Sample]:
    with store.session_scope(open_database(db_url).factory) as session:
        return store.get_samples(session, dataset_id)


def import_upload(
    db_url: str | None,
    filename: str,
    data: bytes,
    name: str | None = None,
    target_path: str | None = None,
    format: str | None = None,
) -> tuple[int, ImportResult]:
    """An uploaded file, imported from the data folder (beside the database's artifacts, not a
    temporary folder that nobody cleans): removed after the import, except SpecForge feature files,
    whose samples keep pointing at them for the train-vs-serve diff."""
    import shutil
    import uuid

    folder = open_database(db_url).artifact_dir.parent / "uploads" / uuid.uuid4().hex
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (Path(filename).name or "upload")
    path.write_bytes(data)
    keep = False
    try:
        dataset_id, result = import_dataset(db_url, path, name or Path(filename).name, target_path, format)
        keep = result.format == "specforge"
        return dataset_id, result
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def delete_dataset(db_url: str | None, dataset_id: int) -> bool:
    """Delete a dataset and its samples; an uploaded file kept for it (a feature file under the
    data folder's uploads/) goes with it. Files the user imported by path are never touched."""
    import shutil

    database = open_database(db_url)
    with store.session_scope(database.factory) as session:
        path = store.delete_dataset(session, dataset_id)
    if path is None:
        return False
    uploads = (database.artifact_dir.parent / "uploads").resolve()
    folder = Path(path).resolve().parent
    if folder.parent == uploads:
        shutil.rmtree(folder, ignore_errors=True)
    return True
