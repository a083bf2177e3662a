"""A run's recorded tensors on disk: part files written as the run commits, one artifact at its end,
and the parts of a run whose writer died merged into it (`recover_artifact`, when the run is reaped)."""

from __future__ import annotations

from pathlib import Path

import torch

from backend.run.records import PrefillRecord, StepRecord
from db.artifacts import read_artifact, write_artifact, write_whole


class RunTensors:
    """A run's recorded tensors, written as they arrive: each writer commit also writes the tensors
    gathered since the last one as a part file (`<artifacts>/<run>/parts/NNNNN.safetensors`), and
    the end of the run writes the artifact from the tensors it holds (the parts go). A run whose
    process was killed keeps every part written, and `recover_artifact` merges them when the run is
    reaped. Token statistics (`chunk_norms`) are computed per batch, in one operation, when the
    writer commits (`pending_stats`)."""

    NAMES = ("aux_features", "aux_positions", "draft_hidden")

    def __init__(self, artifact_dir: Path | None, run_id: int | None, indices):
        self.folder = (
            None if artifact_dir is None or run_id is None else Path(artifact_dir) / str(run_id) / "parts"
        )
        self.indices = tuple(indices)  # the HF indices the draft was fed: one chunk each
        self.pending: dict[str, list[torch.Tensor]] = {name: [] for name in self.NAMES}
        self.prompt: torch.Tensor | None = None
        self.kept: dict[str, list[torch.Tensor]] = {name: [] for name in self.NAMES}  # the artifact's
        self.kept_prompt: torch.Tensor | None = None  # (the records' own tensors: no copies)
        self.unmeasured: list[tuple[torch.Tensor, int]] = []  # (features, first position) to norm
        self.written = 0

    def add(self, record: PrefillRecord | StepRecord) -> None:
        """Keep the record's tensors (their token_stats rows are computed per batch: `pending_stats`)."""
        if record.aux_features is None:
            return
        if isinstance(record, PrefillRecord):
            self.prompt = self.kept_prompt = record.aux_features
            self.unmeasured.append((record.aux_features, 0))
            return
        rows = record.aux_features.shape[0]
        pieces = {
            "aux_features": record.aux_features,
            "aux_positions": torch.arange(record.position, record.position + rows),
            "draft_hidden": record.draft_hidden,
        }
        for name, piece in pieces.items():
            self.pending[name].append(piece)
            self.kept[name].append(piece)
        self.unmeasured.append((record.aux_features, record.position))

    def pending_stats(self) -> list[dict]:
        """The token_stats rows of every record added since the last call: one norm over the batch."""
        if not self.unmeasured:
            return []
        positions = [p + row for features, p in self.unmeasured for row in range(features.shape[0])]
        features = torch.cat([features for features, _ in self.unmeasured])
        self.unmeasured = []
        return chunk_norms(features, positions, self.indices)

    def _batch(self) -> dict[str, torch.Tensor]:
        batch = {
            name: torch.cat(parts) if name != "draft_hidden" else torch.stack(parts)
            for name, parts in self.pending.items()
            if parts
        }
        if self.prompt is not None:
            batch["prompt_aux_features"] = self.prompt
        return batch

    def flush(self) -> None:
        """Write what arrived since the last flush as the next part file."""
        batch = self._batch()
        if not batch or self.folder is None:
            return
        write_part(self.folder, f"{self.written:05d}", batch)
        self.written += 1
        self.pending = {name: [] for name in self.NAMES}
        self.prompt = None

    def save(self, artifact_dir=None, run_id: int | None = None) -> dict:
        """The run's artifact, written as one file from the tensors the run holds (the same file
        `merge_parts` makes of the parts, without reading them back); the parts go."""
        import shutil

        if self.folder is None:
            if artifact_dir is None or run_id is None:
                return {"artifact_path": None, "artifact_sha256": None}
            self.folder = Path(artifact_dir) / str(run_id) / "parts"
        merged = {
            name: torch.stack(parts) if name == "draft_hidden" else torch.cat(parts)
            for name, parts in self.kept.items()
            if parts
        }
        if self.kept_prompt is not None:
            merged["prompt_aux_features"] = self.kept_prompt
        self.kept = {name: [] for name in self.NAMES}
        self.pending = {name: [] for name in self.NAMES}
        self.prompt = self.kept_prompt = None
        if not merged:
            shutil.rmtree(self.folder, ignore_errors=True)
            return {"artifact_path": None, "artifact_sha256": None}
        path, sha = write_artifact(self.folder.parent, "hidden_states", merged)
        shutil.rmtree(self.folder, ignore_errors=True)
        return {"artifact_path": path, "artifact_sha256": sha}


def write_part(folder: Path, name: str, tensors: dict[str, torch.Tensor]) -> None:
    """One part file, written whole or not at all (no digest: parts only live until the merge)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_whole(folder / f"{name}.safetensors", tensors)


def merged_tensors(batches: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Batches (or part files' contents), in order, as one artifact's tensors."""
    merged: dict[str, torch.Tensor] = {}
    for name in RunTensors.NAMES:
        pieces = [batch[name] for batch in batches if name in batch]
        if pieces:
            merged[name] = torch.cat(pieces)
    prompt = next((batch["prompt_aux_features"] for batch in batches if "prompt_aux_features" in batch), None)
    if prompt is not None:
        merged["prompt_aux_features"] = prompt
    return merged


def merge_parts(folder: Path) -> dict:
    """Merge a run's part files (in order) into `<run>/hidden_states.safetensors`; the parts go."""
    import shutil

    parts = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    merged = merged_tensors([read_artifact(str(p)) for p in parts])
    if not merged:
        shutil.rmtree(folder, ignore_errors=True)
        return {"artifact_path": None, "artifact_sha256": None}
    path, sha = write_artifact(folder.parent, "hidden_states", merged)
    shutil.rmtree(folder, ignore_errors=True)
    return {"artifact_path": path, "artifact_sha256": sha}


def recover_artifact(artifact_dir: Path, run_id: int) -> dict:
    """The artifact of a run whose writer died: its part files merged (None when there are none)."""
    return merge_parts(Path(artifact_dir) / str(run_id) / "parts")


def chunk_norms(features: torch.Tensor, first_position, indices) -> list[dict]:
    """Per position and per aux chunk L2 norm of the fused features the draft received (one norm
    over [rows, chunks, Ht]: the same numbers as chunk by chunk). `first_position` is the first
    row's position, or a list with each row's."""
    rows, chunks = features.shape[0], len(indices)
    norms = features.float().reshape(rows, chunks, -1).norm(dim=-1).tolist()
    positions = (
        range(first_position, first_position + rows) if isinstance(first_position, int) else first_position
    )
    names = [f"hf{index}" for index in indices]
    return [
        {"position": position, "chunk": name, "norm": value}
        for position, values in zip(positions, norms, strict=True)
        for name, value in zip(names, values, strict=True)
    ]
