"""Hidden-state comparisons: the features a draft is fed vs a reference, per token and per chunk.

Metrics per (position, chunk), all computed in fp32 (Model-Optimizer's lesson: report the norm ratio
next to cosine; a 50x scale bug still shows cosine 1.000003):
- cosine: cos(a, b);  norm_ratio: |a| / |b|;  max_abs_diff: max_i |a_i - b_i|;
- relative_error: |a - b| / |b|.
A chunk mismatches when cosine < 0.999 or relative_error > 0.05 (bf16 rounding stays far inside).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from backend import BadInput
from backend.checkpoints import Target
from backend.mismatch import (  # noqa: F401 - is_mismatch and chunk_summary re-exported
    COSINE_THRESHOLD,
    DEFINITIONS,
    RELATIVE_ERROR_THRESHOLD,
    chunk_summary,
    first_mismatch,
    is_mismatch,
)
from backend.teacher import target_pass

FEATURE_KEYS = ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state")


def compare_chunks(fed: torch.Tensor, reference: torch.Tensor, positions: list[int], chunk_names: list[str],
                   reference_label: str) -> list[dict]:
    """fed, reference [T, n*Ht] -> one row per (position, chunk) with the four metrics."""
    if fed.shape != reference.shape:
        raise BadInput(f"cannot compare features of shape {tuple(fed.shape)} with {tuple(reference.shape)}")
    n = len(chunk_names)
    a = fed.float().reshape(fed.shape[0], n, -1)
    b = reference.float().reshape(reference.shape[0], n, -1)
    norm_a, norm_b = a.norm(dim=-1), b.norm(dim=-1)
    cosine = torch.nn.functional.cosine_similarity(a, b, dim=-1, eps=1e-12)
    difference = a - b
    tiny = torch.finfo(torch.float32).tiny
    ratio = norm_a / norm_b.clamp_min(tiny)
    max_abs = difference.abs().amax(dim=-1)
    relative = difference.norm(dim=-1) / norm_b.clamp_min(tiny)
    rows = []
    for row, position in enumerate(positions):
        for chunk, name in enumerate(chunk_names):
            rows.append({"position": int(position), "chunk": name, "reference": reference_label,
                         "norm": float(norm_a[row, chunk]), "cosine": float(cosine[row, chunk]),
                         "norm_ratio": float(ratio[row, chunk]), "max_abs_diff": float(max_abs[row, chunk]),
                         "relative_error": float(relative[row, chunk])})
    return rows


# ----------------------------------------------------------------------------- SpecForge feature files


@dataclass
class FeatureFile:
    path: str
    input_ids: list[int]
    loss_mask: list[int]
    aux_hidden_state: torch.Tensor  # [T, 3*Ht]
    hidden_state: torch.Tensor | None  # [T, Ht] post-norm last hidden


def load_feature_file(path: str | Path, hidden_size: int | None = None) -> FeatureFile:
    """A SpecForge offline feature file (`torch.save` dict), loaded with weights_only=True."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{path}: no such feature file")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unpickling refusal is the user's file
        raise BadInput(f"{path}: not a tensor-only torch file ({type(error).__name__}: "
                       f"{str(error).splitlines()[0][:200]})") from error
    if not isinstance(data, dict):
        raise BadInput(f"{path}: expected a dict with {', '.join(FEATURE_KEYS)}")
    missing = [k for k in ("input_ids", "aux_hidden_state") if k not in data]
    if missing:
        raise BadInput(f"{path}: lacks {', '.join(missing)} (SpecForge feature files carry {', '.join(FEATURE_KEYS)})")
    ids = torch.as_tensor(data["input_ids"]).reshape(-1)
    aux = torch.as_tensor(data["aux_hidden_state"])
    aux = aux[0] if aux.ndim == 3 else aux
    if aux.ndim != 2 or aux.shape[0] != len(ids):
        raise BadInput(f"{path}: aux_hidden_state {tuple(data['aux_hidden_state'].shape)} does not match "
                       f"{len(ids)} input_ids")
    if aux.shape[1] % 3:
        raise BadInput(f"{path}: aux_hidden_state width {aux.shape[1]} is not 3 * hidden size")
    if hidden_size is not None and aux.shape[1] != 3 * hidden_size:
        raise BadInput(f"{path}: aux_hidden_state width {aux.shape[1]} != 3 * target hidden {hidden_size}: "
                       "features of another target")
    mask = torch.as_tensor(data.get("loss_mask", torch.ones(len(ids)))).reshape(-1)
    hidden = data.get("hidden_state")
    if hidden is not None:
        hidden = torch.as_tensor(hidden)
        hidden = hidden[0] if hidden.ndim == 3 else hidden
    return FeatureFile(str(path), ids.tolist(), mask.long().tolist(), aux, hidden)


@dataclass
class TrainServeDiff:
    rows: list[dict]
    chunk_names: list[str]
    serving_indices: list[int]
    first_mismatch: dict | None
    summary: list[dict]
    matches: list[dict]  # per training chunk: the HF index whose states it equals best
    training_indices: list[int | None]

    def to_dict(self) -> dict:
        return {"serving_aux_hf_indices": self.serving_indices, "first_mismatch": self.first_mismatch,
                "summary": self.summary, "training_chunk_matches": self.matches,
                "training_aux_hf_indices": self.training_indices, "definitions": DEFINITIONS}


def train_vs_serve(target: Target, features: FeatureFile, serving_indices) -> TrainServeDiff:
    """Recompute the features serving feeds for the file's tokens and compare them chunk by chunk
    with what training stored; also find which HF index each training chunk really is."""
    if any(i >= target.vocab_size or i < 0 for i in features.input_ids):
        raise BadInput(f"{features.path}: token ids outside the target's vocabulary ({target.vocab_size})")
    every = list(range(target.num_layers + 1))
    passed = target_pass(target, features.input_ids, features.loss_mask, every)
    serving = passed.features(serving_indices).cpu()
    names = [f"chunk{k} (serve HF {i})" for k, i in enumerate(serving_indices)]
    positions = list(range(len(features.input_ids)))
    rows = compare_chunks(serving, features.aux_hidden_state, positions, names, features.path)
    matches, training = [], []
    for chunk, stored in enumerate(features.aux_hidden_state.float().chunk(3, dim=-1)):
        scores = []
        for index in every:
            state = passed.states[index].float().cpu()
            cosine = torch.nn.functional.cosine_similarity(state, stored, dim=-1).mean().item()
            ratio = (state.norm(dim=-1) / stored.norm(dim=-1).clamp_min(1e-12)).mean().item()
            scores.append((cosine, ratio, index))
        cosine, ratio, index = max(scores)
        equal = cosine >= COSINE_THRESHOLD and abs(ratio - 1) < RELATIVE_ERROR_THRESHOLD
        matches.append({"chunk": chunk, "best_hf_index": index, "mean_cosine": cosine, "mean_norm_ratio": ratio,
                        "equal": equal})
        training.append(index if equal else None)
    return TrainServeDiff(rows, names, list(serving_indices), first_mismatch(rows, names),
                          chunk_summary(rows, names), matches, training)
