"""When a compared chunk counts as a mismatch, and summaries over compared rows (docs/reference.md §8).

Plain Python, so pages can use it without torch: the compared rows as the pages read them (ChunkRow,
a stored token_stats row too) and the train-vs-serve diff's result (backend/diagnostics/hidden_diff.py)."""

from __future__ import annotations

from dataclasses import dataclass

from backend.plain import Plain

COSINE_THRESHOLD = 0.999
RELATIVE_ERROR_THRESHOLD = 0.05
DEFINITIONS = {
    "cosine": "cos(fed, reference) per token and chunk",
    "norm_ratio": "|fed| / |reference|",
    "max_abs_diff": "max over hidden units of |fed - reference|",
    "relative_error": "|fed - reference| / |reference|",
    "mismatch": f"cosine < {COSINE_THRESHOLD} or relative error > {RELATIVE_ERROR_THRESHOLD}",
}


def mismatched(cosine: float | None, relative_error: float | None) -> bool:
    """The one rule: a chunk mismatches its reference below COSINE_THRESHOLD or above
    RELATIVE_ERROR_THRESHOLD (no reference: never)."""
    return (cosine is not None and cosine < COSINE_THRESHOLD) or (
        relative_error is not None and relative_error > RELATIVE_ERROR_THRESHOLD
    )


def is_mismatch(row: dict) -> bool:
    return mismatched(row["cosine"], row["relative_error"])


def first_mismatch(rows: list[dict], chunk_order: list[str]) -> dict | None:
    """The earliest position with a mismatching chunk (the lowest chunk there)."""
    bad = [r for r in rows if is_mismatch(r)]
    return min(bad, key=lambda r: (r["position"], chunk_order.index(r["chunk"]))) if bad else None


def chunk_summary(rows: list[dict], chunk_order: list[str]) -> list[dict]:
    summary = []
    for name in chunk_order:
        mine = [r for r in rows if r["chunk"] == name]
        if not mine:
            continue
        summary.append(
            {
                "chunk": name,
                "positions": len(mine),
                "mean_cosine": sum(r["cosine"] for r in mine) / len(mine),
                "min_cosine": min(r["cosine"] for r in mine),
                "mean_norm_ratio": sum(r["norm_ratio"] for r in mine) / len(mine),
                "max_relative_error": max(r["relative_error"] for r in mine),
                "mismatching": sum(is_mismatch(r) for r in mine),
            }
        )
    return summary


@dataclass(frozen=True)
class ChunkRow(Plain):
    """One (position, chunk) of the features a draft is fed against `reference` (hidden_diff.compare_chunks;
    token_stats keeps them per run): `norm` of the fed chunk and the comparison metrics (DEFINITIONS),
    None where there is no reference (the fed features' own norms)."""

    position: int
    chunk: str
    reference: str | None = None
    norm: float | None = None
    cosine: float | None = None
    norm_ratio: float | None = None
    max_abs_diff: float | None = None
    relative_error: float | None = None

    @property
    def mismatched(self) -> bool:
        return mismatched(self.cosine, self.relative_error)


@dataclass(frozen=True)
class ChunkSummary(Plain):
    """One chunk over every position (chunk_summary)."""

    chunk: str
    positions: int
    mean_cosine: float
    min_cosine: float
    mean_norm_ratio: float
    max_relative_error: float
    mismatching: int


@dataclass(frozen=True)
class ChunkMatch(Plain):
    """One stored training chunk: the HF index whose states it equals best, and whether it equals them."""

    chunk: int
    best_hf_index: int
    mean_cosine: float
    mean_norm_ratio: float
    equal: bool


@dataclass(frozen=True)
class TrainServeResult(Plain):
    """The train-vs-serve diff of one feature file (hidden_diff.train_vs_serve): what serving feeds,
    where it first differs from the stored training features, which HF index each training chunk
    is, with its rows, its chunks in order, the file's tokens and the target they ran on."""

    serving_aux_hf_indices: list[int]
    first_mismatch: ChunkRow | None
    summary: list[ChunkSummary]
    training_chunk_matches: list[ChunkMatch]
    training_aux_hf_indices: list[int | None]
    definitions: dict[str, str]
    rows: list[ChunkRow]
    chunk_names: list[str]
    input_ids: list[int]
    target: str
    fix: str = (
        ""  # what to write where the training chunks name the layers (train_serve.train_serve_findings)
    )
