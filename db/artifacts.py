"""Large tensors of a run in one safetensors file, referenced from its row by path and sha256."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_artifact(directory: Path, name: str, tensors: dict[str, torch.Tensor]) -> tuple[str, str]:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.safetensors"
    partial = path.with_suffix(".partial")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(partial))
    partial.replace(path)  # a crash mid-write never leaves a truncated artifact under the real name
    return str(path), sha256_of(path)


def read_artifact(path: str, expected_sha256: str | None = None) -> dict[str, torch.Tensor]:
    if expected_sha256 is not None and sha256_of(Path(path)) != expected_sha256:
        raise ValueError(f"{path}: sha256 does not match the run's record (file changed or corrupt)")
    return load_file(path)
