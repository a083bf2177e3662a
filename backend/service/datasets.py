"""Datasets in the store: import a file (validated by backend.data), list them, read their samples."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from backend import BadInput
from backend.data.importer import ImportResult, check_source, stream_dataset
from backend.data.samples import Sample
from backend.defaults import BUNDLED_EVAL_SETS
from backend.drafts.json_config import TOKENIZER_FILES
from backend.service.database import open_database, refused_in_one_line
from backend.service.readers import in_reader
from backend.service.stamps import stamp
from db import schema, store

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


@refused_in_one_line
def import_dataset(
    db_url: str | None,
    path: str | Path,
    name: str | None = None,
    target_path: str | None = None,
    format: str | None = None,
) -> tuple[int, ImportResult]:
    """Validate and store; the dataset and its good samples land in one transaction. A file with no
    good record is refused (BadInput) and nothing is stored."""
    check_source(path)  # before the target's tokenizer: a bad path costs no model-stack import
    tokenizer, vocab_size = target_vocabulary(target_path)
    format, samples, rejected = stream_dataset(path, tokenizer, vocab_size, format)
    digest = hashlib.sha256()  # the samples' digest as they stream by (memory: one sample)
    try:
        with store.session_scope(open_database(db_url).factory) as session:
            dataset_id, count = store.create_dataset_streaming(
                session,
                name=name or Path(path).name,
                path=str(path),
                format=format,
                samples=_digested(samples, digest),
            )
            if not count:  # raising here rolls the dataset back: nothing is stored
                reasons = "; ".join(f"line {r.line}: {r.reason}" for r in rejected[:3])
                raise BadInput(f"{path}: no valid record" + (f" ({reasons})" if reasons else " (empty file)"))
            same = store.same_dataset(session, dataset_id, digest.hexdigest())
            if same is not None:  # rolled back: the first import stands
                raise _AlreadyImported(same)
    except _AlreadyImported as found:
        return found.dataset_id, ImportResult(format, [], rejected, imported=0, already=found.dataset_id)
    return dataset_id, ImportResult(format, [], rejected, imported=count)


class _AlreadyImported(Exception):
    def __init__(self, dataset_id: int):
        self.dataset_id = dataset_id


def _digested(samples, digest):
    for sample in samples:
        store.samples_digest([sample], digest)
        yield sample


def ensure_demo_dataset(db_url: str | None) -> int | None:
    """On a fresh database register each bundled pair's eval sets (the toy's, then the SmolLM2
    pair's HumanEval with and without the chat template), those on disk; the first one's id. Not on
    a database opened read-only: reading it must not need a write."""
    if schema.read_only(store.database_url(db_url)):
        return None
    with store.session_scope(open_database(db_url).factory) as session:
        if store.list_datasets(session):
            return None
    ids = [
        import_dataset(db_url, path, name=name, format="jsonl")[0]
        for name, path in BUNDLED_EVAL_SETS
        if path.is_file()
    ]
    return ids[0] if ids else None


def list_datasets(db_url: str | None) -> list[DatasetInfo]:
    with store.session_scope(open_database(db_url).factory) as session:
        return store.list_datasets(session)


def get_samples(db_url: str | None, dataset_id: int, limit: int | None = None) -> list[Sample]:
    with store.session_scope(open_database(db_url).factory) as session:
        return store.get_samples(session, dataset_id, limit)


def uploads_dir(db_url: str | None) -> Path:
    """Where uploaded files are kept: uploads/ beside the database's artifacts (data/uploads for the
    default database), one folder per upload."""
    return open_database(db_url).artifact_dir.parent / "uploads"


@refused_in_one_line
def import_upload(
    db_url: str | None,
    filename: str,
    data: bytes,
    name: str | None = None,
    target_path: str | None = None,
    format: str | None = None,
) -> tuple[int, ImportResult]:
    """An uploaded file, saved under the data folder's uploads/<random>/<its own file name> (never a
    temporary folder) and imported from there: the dataset's path is that saved copy, so the dataset
    says where it came from, and a SpecForge feature file's samples keep pointing at it for the
    train-vs-serve diff. A refused import removes the copy; deleting the dataset removes it too."""
    import shutil
    import uuid

    folder = uploads_dir(db_url) / uuid.uuid4().hex
    folder.mkdir(parents=True, exist_ok=True)
    path = (folder / (Path(filename).name or "upload")).resolve()
    path.write_bytes(data)
    try:
        found = import_dataset(db_url, path, name or Path(filename).name, target_path, format)
    except BadInput as error:  # named as the user knows the file, not as the server keeps its copy
        shutil.rmtree(folder, ignore_errors=True)
        raise BadInput(str(error).replace(str(path), Path(filename).name or "the upload")) from None
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    if found[1].already is not None:  # the same samples as an earlier dataset: no second copy kept
        shutil.rmtree(folder, ignore_errors=True)
    return found


def uploaded_as(db_url: str | None, path: str | None) -> str | None:
    """The original file name of an uploaded dataset (its saved copy under uploads/<folder>/), or
    None for a dataset imported by path."""
    if not path:
        return None
    uploads = uploads_dir(db_url).resolve()
    saved = Path(path).resolve()
    return saved.name if saved.parent.parent == uploads else None


FEATURE_MEANING = {
    "input_ids": "token ids",
    "loss_mask": "1 where the draft was trained",
    "hidden_state": "target's last hidden state (post-norm), per token",
    "aux_hidden_state": "3 target layers' hidden states side by side (the draft's input), per token",
}


def feature_tensors(path: str | None) -> list[dict]:
    """Name, shape and dtype of each tensor a SpecForge feature file holds (hidden_state,
    aux_hidden_state, ...), read memory-mapped with weights_only=True: the tensors' data is not read.
    A missing or unreadable file is BadInput with a one-line reason."""
    if not path:
        raise BadInput("this sample names no feature file")
    file = Path(path)
    if not file.is_file():
        raise BadInput(f"{file.name}: the feature file is no longer at {file}")
    import torch

    from backend.data.features import check_archive_size
    from backend.drafts.torch_files import load_refused

    check_archive_size(file)
    data, error = None, None
    for mapped in (True, False):  # a legacy (non-zip) torch file cannot be memory-mapped
        try:
            data = torch.load(file, map_location="cpu", weights_only=True, mmap=mapped)
            break
        except Exception as refused:  # noqa: BLE001 - any unpickling refusal is the file's
            error = refused
    else:
        raise load_refused(file.name, error)
    if not isinstance(data, dict):
        raise BadInput(f"{file.name}: holds a {type(data).__name__}, not a dict of tensors")
    rows = []
    for key, value in data.items():
        tensor = isinstance(value, torch.Tensor)
        rows.append(
            {
                "tensor": str(key),
                "shape": str(list(value.shape)) if tensor else "",
                "dtype": str(value.dtype).removeprefix("torch.") if tensor else type(value).__name__,
                "holds": FEATURE_MEANING.get(str(key), ""),
            }
        )
    return rows


@refused_in_one_line
def delete_dataset(db_url: str | None, dataset_id: int) -> bool:
    """Delete a dataset and its samples; the uploaded file kept for it (under the data folder's
    uploads/) goes with it. Files the user imported by path are never touched."""
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


def tokenizer_fit(db_url: str | None, dataset_id: int, target_path: str | None):
    """Whether the dataset's ids were made by this target's tokenizer (backend.data.tokenizer_fit);
    None when the target cannot be read (the pages say that elsewhere). The tokenizer is loaded in the
    reader process (transformers); the answer is kept until the target's files change."""
    if not target_path:
        return None
    files = [Path(target_path, "config.json"), *(Path(target_path, f) for f in TOKENIZER_FILES)]
    return _fit(db_url, dataset_id, str(target_path), stamp(*files))


@lru_cache(maxsize=64)
def _fit(db_url: str | None, dataset_id: int, target_path: str, _stamp: tuple):
    return in_reader(read_tokenizer_fit, db_url, dataset_id, target_path)


def read_tokenizer_fit(db_url: str | None, dataset_id: int, target_path: str, progress=None):
    """tokenizer_fit's reading (a reader job: the tokenizer needs transformers)."""
    from backend.data.tokenizer_fit import SAMPLES
    from backend.data.tokenizer_fit import tokenizer_fit as read_fit

    try:
        tokenizer, vocab_size = target_vocabulary(target_path)
    except BadInput:
        return None
    if vocab_size is None:
        return None
    return read_fit(get_samples(db_url, dataset_id, limit=SAMPLES), tokenizer, vocab_size)


def preferred_dataset(db_url: str | None, target_path: str | None) -> int | None:
    """The registered eval set bundled with this target (the first of its pair's), None for a target
    SpecLens did not bundle or when that set is not registered."""
    from backend.defaults import pair_of

    pair = pair_of(target_path)
    if pair is None:
        return None
    registered = {str(Path(d.path).resolve()): d.id for d in list_datasets(db_url) if d.path}
    return next(
        (registered[str(p.resolve())] for _, p in pair.eval_sets if str(p.resolve()) in registered), None
    )
