"""When a compared chunk counts as a mismatch, and summaries over compared rows (docs/reference.md §8).

Plain Python, so pages can use it without torch."""

from __future__ import annotations

COSINE_THRESHOLD = 0.999
RELATIVE_ERROR_THRESHOLD = 0.05
DEFINITIONS = {
    "cosine": "cos(fed, reference) per token and chunk",
    "norm_ratio": "|fed| / |reference|",
    "max_abs_diff": "max over hidden units of |fed - reference|",
    "relative_error": "|fed - reference| / |reference|",
    "mismatch": f"cosine < {COSINE_THRESHOLD} or relative error > {RELATIVE_ERROR_THRESHOLD}",
}


def is_mismatch(row: dict) -> bool:
    return row["cosine"] < COSINE_THRESHOLD or row["relative_error"] > RELATIVE_ERROR_THRESHOLD


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
