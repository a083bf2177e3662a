"""SpecForge offline feature files (.ckpt): what a draft was trained on (docs/reference.md §5).

A `torch.save` dict per sample: input_ids [T], loss_mask [T], hidden_state [1, T, Ht] (the target's
last hidden, post-norm) and aux_hidden_state [1, T, n*Ht]: n = 3 for EAGLE-3 (SpecForge's offline data);
a DFlash draft's features in the same dict hold one chunk per target layer it reads (SpecForge and
z-lab train DFlash online and write none; a team that dumps them this way is read the same).
Loaded with weights_only=True only.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from backend import BadInput
from backend.drafts.torch_files import load_refused

FEATURE_KEYS = ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state")


@dataclass
class FeatureFile:
    path: str
    input_ids: list[int]
    loss_mask: list[int]
    aux_hidden_state: torch.Tensor  # [T, n*Ht]: n layer chunks
    hidden_state: torch.Tensor | None  # [T, Ht] post-norm last hidden
    chunks: int = 3  # n: layer chunks in aux_hidden_state (3 unless the target's width says otherwise)


MAX_UNPACKED_BYTES = 8 * 1024**3  # what a feature file may hold once unpacked
MAX_UNPACK_RATIO = 20  # tensors compress little; a zip bomb unpacks thousands of times its size


def check_archive_size(path: Path) -> None:
    """A torch file is a zip archive: its members' declared sizes are checked before anything is
    unpacked, so a 1 MB file claiming gigabytes is refused instead of filling memory."""
    try:
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(member.file_size for member in archive.infolist())
    except zipfile.BadZipFile:
        return  # the legacy (non-zip) format: torch.load's own checks apply
    size = max(1, path.stat().st_size)
    if unpacked > MAX_UNPACKED_BYTES or unpacked > MAX_UNPACK_RATIO * size + 64 * 1024**2:
        raise BadInput(
            f"{path}: unpacks to {unpacked / 1024**2:.0f} MB from {size / 1024**2:.1f} MB on disk; refusing "
            "(a feature file of tensors does not compress like that)"
        )


def file_problem(path: Path, what: str = "feature file") -> str | None:
    """Why `path` is not a file to load, in one line naming it (missing, a folder); None when it is one."""
    if path.is_dir():
        return f"{path}: a folder, not a {what} (give the .ckpt file itself)"
    if not path.is_file():
        return f"{path}: no such {what}"
    return None


def load_feature_file(path: str | Path, hidden_size: int | None = None) -> FeatureFile:
    """A SpecForge offline feature file (`torch.save` dict), loaded with weights_only=True."""
    path = Path(path)
    said = file_problem(path)
    if said:
        raise BadInput(said)
    check_archive_size(path)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # any unpickling refusal is the user's file
        raise load_refused(path, error) from error
    if not isinstance(data, dict):
        raise BadInput(f"{path}: expected a dict with {', '.join(FEATURE_KEYS)}")
    missing = [k for k in ("input_ids", "aux_hidden_state") if k not in data]
    if missing:
        raise BadInput(
            f"{path}: lacks {', '.join(missing)} (SpecForge feature files carry {', '.join(FEATURE_KEYS)})"
        )
    ids = torch.as_tensor(data["input_ids"]).reshape(-1)
    aux = torch.as_tensor(data["aux_hidden_state"])
    aux = aux[0] if aux.ndim == 3 else aux
    if aux.ndim != 2 or aux.shape[0] != len(ids):
        raise BadInput(
            f"{path}: aux_hidden_state {tuple(data['aux_hidden_state'].shape)} does not match "
            f"{len(ids)} input_ids"
        )
    if hidden_size is None and aux.shape[1] % 3:
        raise BadInput(f"{path}: aux_hidden_state width {aux.shape[1]} is not 3 * hidden size")
    if hidden_size is not None and (aux.shape[1] % hidden_size or not aux.shape[1]):
        raise BadInput(
            f"{path}: aux_hidden_state width {aux.shape[1]} is not a multiple of the target's hidden size "
            f"{hidden_size}: features of another target"
        )
    chunks = aux.shape[1] // hidden_size if hidden_size else 3
    mask = torch.as_tensor(data.get("loss_mask", torch.ones(len(ids)))).reshape(-1)
    hidden = data.get("hidden_state")
    if hidden is not None:
        hidden = torch.as_tensor(hidden)
        hidden = hidden[0] if hidden.ndim == 3 else hidden
    return FeatureFile(str(path), ids.tolist(), mask.long().tolist(), aux, hidden, chunks)
