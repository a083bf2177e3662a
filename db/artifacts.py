"""Large tensors of a run in one safetensors file, referenced from its row by path and sha256."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from safetensors.torch import load_file, save


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_artifact(directory: Path, name: str, tensors: dict[str, torch.Tensor]) -> tuple[str, str]:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.safetensors"
    write_whole(path, tensors)
    return str(path), sha256_of(path)


def write_whole(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """A safetensors file written whole or not at all: under a temporary name, renamed when complete
    (a crash mid-write never leaves a truncated file under the real name). Python writes the bytes,
    so a disk that refuses them raises OSError with its errno and the file's name (ENOSPC, EFBIG),
    and the partial file is removed."""
    partial = path.with_suffix(".partial")
    data = save({k: v.contiguous() for k, v in tensors.items()})
    try:
        with partial.open("wb") as handle:
            handle.write(data)
    except OSError as error:
        partial.unlink(missing_ok=True)
        error.filename = error.filename or str(partial)
        raise
    partial.replace(path)


def read_artifact(path: str, expected_sha256: str | None = None) -> dict[str, torch.Tensor]:
    if expected_sha256 is not None and sha256_of(Path(path)) != expected_sha256:
        raise ValueError(f"{path}: sha256 does not match the run's record (file changed or corrupt)")
    return load_file(path)
