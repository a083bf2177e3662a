"""The train-vs-serve diff (backend/diagnostics/hidden_diff.py) as diagnose's findings: with the draft's
own training features, whether the features serving feeds are the ones it was trained on, and, when
they are not, which target layers training stored (the one cheap check that can see the wiring)."""

from __future__ import annotations

from backend.diagnostics.findings import Finding
from backend.diagnostics.mismatch import TrainServeResult
from backend.drafts.reading_fixes import wiring_fix
from backend.plain import plain


def train_serve_findings(diff: TrainServeResult, feature_path: str, dflash: bool = False) -> list[Finding]:
    """`diff`: the train-vs-serve diff of the features served under the reading being diagnosed;
    `dflash`: the draft is a DFlash one, whose fix is its `dflash_config.target_layer_ids` (HF - 1)."""
    served, found = diff.serving_aux_hf_indices, diff.training_aux_hf_indices
    mismatch = diff.first_mismatch
    evidence = {
        "features": feature_path,
        "served": list(served),
        "training": list(found),
        "first_mismatch": plain(mismatch),
    }
    if not mismatch:
        return [
            Finding(
                "aux-wiring",
                "info",
                f"the features serving feeds (HF {list(served)}) equal the training features in {feature_path}",
                evidence,
            )
        ]
    where = f"from {mismatch.chunk} at position {mismatch.position}"
    if found and all(index is not None for index in found):
        fixes = (
            f"Write dflash_config.target_layer_ids = {[i - 1 for i in found]} in the draft's config.json "
            "(z-lab ids, HF - 1; every engine reads them)"
            if dflash
            else "Declare the trained wiring. "
            + "; ".join(f"{engine}: {wiring_fix(engine, list(found))[0]}" for engine in ("sglang", "vllm"))
        )
        return [
            Finding(
                "aux-wiring",
                "fail",
                f"the draft was trained on HF {list(found)} (its training features in {feature_path} equal "
                f"those layers), but serving feeds HF {list(served)}: they differ {where}",
                evidence,
                f"{fixes}.",
            )
        ]
    return [
        Finding(
            "train-serve-gap",
            "fail",
            f"the features serving feeds (HF {list(served)}) are not the ones in {feature_path} (they differ "
            f"{where}), and the training chunks equal no single target layer here (HF {list(found)}; "
            "None: no layer matches)",
            evidence,
            "Check that the feature file comes from this target and this draft's training run; then run "
            "Diagnose on samples: the wiring probe measures acceptance under candidate wirings.",
        )
    ]
