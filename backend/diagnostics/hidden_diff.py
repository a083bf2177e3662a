"""Hidden-state comparisons: the features a draft is fed vs a reference, per token and per chunk (docs/reference.md §8).

Metrics per (position, chunk), all computed in fp32 (Model-Optimizer's lesson: report the norm ratio
next to cosine; a 50x scale bug still shows cosine 1.000003):
- cosine: cos(a, b);  norm_ratio: |a| / |b|;  max_abs_diff: max_i |a_i - b_i|;
- relative_error: |a - b| / |b|.
A chunk mismatches when cosine < 0.999 or relative_error > 0.05 (bf16 rounding stays far inside).
Two all-zero vectors are equal (cosine 1, norm ratio 1, errors 0): the embedding output of a padding
token (nn.Embedding's padding_idx row, e.g. a Llama whose pad id is its EOS) is exactly zero on both
sides, and an undefined cosine there would call the embedding chunk a mismatch.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from backend import BadInput
from backend.data.features import FeatureFile
from backend.diagnostics.mismatch import (
    COSINE_THRESHOLD,
    DEFINITIONS,
    RELATIVE_ERROR_THRESHOLD,
    ChunkMatch,
    TrainServeResult,
    chunk_summary,
    first_mismatch,
)
from backend.diagnostics.train_serve import train_serve_findings
from backend.engine.loading import Target
from backend.engine.teacher import target_pass


def cosine_and_norm_ratio(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row (last dim the vector): cos(a, b) and |a| / |b|, two all-zero rows counting as equal."""
    norm_a, norm_b = a.norm(dim=-1), b.norm(dim=-1)
    both_zero = (norm_a == 0) & (norm_b == 0)
    cosine = torch.nn.functional.cosine_similarity(a, b, dim=-1, eps=1e-12).masked_fill(both_zero, 1.0)
    ratio = (norm_a / norm_b.clamp_min(torch.finfo(torch.float32).tiny)).masked_fill(both_zero, 1.0)
    return cosine, ratio


def compare_chunks(
    fed: torch.Tensor,
    reference: torch.Tensor,
    positions: list[int],
    chunk_names: list[str],
    reference_label: str,
) -> list[dict]:
    """fed, reference [T, n*Ht] -> one row per (position, chunk) with the four metrics."""
    if fed.shape != reference.shape:
        raise BadInput(f"cannot compare features of shape {tuple(fed.shape)} with {tuple(reference.shape)}")
    n = len(chunk_names)
    a = fed.float().reshape(fed.shape[0], n, -1)
    b = reference.float().reshape(reference.shape[0], n, -1)
    norm_a, norm_b = a.norm(dim=-1), b.norm(dim=-1)
    cosine, ratio = cosine_and_norm_ratio(a, b)
    difference = a - b
    max_abs = difference.abs().amax(dim=-1)
    relative = difference.norm(dim=-1) / norm_b.clamp_min(
        torch.finfo(torch.float32).tiny
    )  # 0 when both are 0
    rows = []
    for row, position in enumerate(positions):
        for chunk, name in enumerate(chunk_names):
            rows.append(
                {
                    "position": int(position),
                    "chunk": name,
                    "reference": reference_label,
                    "norm": float(norm_a[row, chunk]),
                    "cosine": float(cosine[row, chunk]),
                    "norm_ratio": float(ratio[row, chunk]),
                    "max_abs_diff": float(max_abs[row, chunk]),
                    "relative_error": float(relative[row, chunk]),
                }
            )
    return rows


def train_vs_serve(
    target: Target, features: FeatureFile, serving_indices, dflash: bool = False
) -> TrainServeResult:
    """Recompute the features serving feeds for the file's tokens and compare them chunk by chunk
    with what training stored; also find which HF index each training chunk really is, and the fix
    (`dflash`: the draft is a DFlash one, fixed in its dflash_config)."""
    if any(i >= target.vocab_size or i < 0 for i in features.input_ids):
        raise BadInput(f"{features.path}: token ids outside the target's vocabulary ({target.vocab_size})")
    if features.chunks != len(serving_indices):
        raise BadInput(
            f"{features.path}: holds {features.chunks} layer chunks, the draft is fed {len(serving_indices)} "
            f"(HF {list(serving_indices)}): not this draft's training features"
        )
    every = list(range(target.num_layers + 1))
    passed = target_pass(target, features.input_ids, features.loss_mask, every)
    serving = passed.features(serving_indices).cpu()
    names = [f"chunk{k} (serve HF {i})" for k, i in enumerate(serving_indices)]
    positions = list(range(len(features.input_ids)))
    rows = compare_chunks(serving, features.aux_hidden_state, positions, names, features.path)
    matches, training = [], []
    for chunk, stored in enumerate(features.aux_hidden_state.float().chunk(features.chunks, dim=-1)):
        scores = []
        for index in every:
            state = passed.states[index].float().cpu()
            cosine, ratio = cosine_and_norm_ratio(state, stored)
            scores.append((cosine.mean().item(), ratio.mean().item(), index))
        cosine, ratio, index = max(scores)
        equal = cosine >= COSINE_THRESHOLD and abs(ratio - 1) < RELATIVE_ERROR_THRESHOLD
        matches.append(ChunkMatch(chunk, index, cosine, ratio, equal))
        training.append(index if equal else None)
    result = TrainServeResult.from_dict(
        {
            "serving_aux_hf_indices": list(serving_indices),
            "first_mismatch": first_mismatch(rows, names),
            "summary": chunk_summary(rows, names),
            "training_chunk_matches": matches,
            "training_aux_hf_indices": training,
            "definitions": DEFINITIONS,
            "rows": rows,
            "chunk_names": names,
            "input_ids": list(features.input_ids),
            "target": target.path,
        }
    )
    fixes = [f.fix for f in train_serve_findings(result, features.path, dflash) if f.fix]
    return replace(result, fix=fixes[0] if fixes else "")
