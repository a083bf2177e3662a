"""The serving lint of a DFlash draft: what an SGLang, vLLM or llama.cpp command does with it, each
finding naming the flag or config field and the value to write (the readings and their sources:
backend/drafts/dflash_readings.py)."""

from __future__ import annotations

from pathlib import Path

from backend.diagnostics.findings import Finding, severity
from backend.drafts.dflash_config import DFlashConfig, parse_dflash_config
from backend.drafts.json_config import read_json_object

METHODS = {"vllm": "dflash", "sglang": "DFLASH"}


def dflash_config_of(draft_dir: str | Path) -> DFlashConfig:
    where = Path(draft_dir) / "config.json"
    return parse_dflash_config(read_json_object(where), str(where))


def dflash_findings(
    engine: str,
    config: DFlashConfig,
    num_layers: int | None,
    drafts: int | None,
    method: str | None,
    draft_dir,
) -> list[Finding]:
    """`drafts`: the K the command serves (vLLM num_speculative_tokens, SGLang num_draft_tokens - 1,
    llama.cpp --spec-draft-n-max); `method`: the algorithm the command names (None: not given)."""
    found: list[Finding] = []

    def add(word: str, code: str, message: str, fix: str) -> None:
        found.append(Finding(code, severity(word), message, fix=fix))

    trained = config.num_drafts
    if engine in METHODS and method and method.lower() != METHODS[engine].lower():
        add(
            "error",
            "dflash-method",
            f"The command runs {method} on a DFlash draft ({config.architecture}).",
            f"Use {METHODS[engine]}"
            + (
                ' ("method": "dflash" in --speculative-config)'
                if engine == "vllm"
                else " (--speculative-algorithm DFLASH)"
            ),
        )
    if drafts is not None and drafts != trained:
        said = {
            "vllm": f'"num_speculative_tokens": {trained}',
            "sglang": f"--speculative-num-draft-tokens {config.block_size} (SGLang counts the anchor)",
            "llamacpp": f"--spec-draft-n-max {trained}",
        }[engine]
        clamped = (
            f" llama.cpp clamps it to {trained} with a log line only (common/speculative.cpp)."
            if engine == "llamacpp" and drafts > trained
            else ""
        )
        add(
            "warning",
            "dflash-block-length",
            f"The command drafts K = {drafts} (a block of {drafts + 1}); the draft was trained on block_size "
            f"{config.block_size} (K = {trained}). Attention runs both ways inside the block, so every draft "
            f"changes with K, not only how many are kept.{clamped}",
            f"Serve {said}, or measure the other K with `speculens replay --steps {drafts}` first.",
        )
    if num_layers and num_layers - 1 in config.target_layer_ids:
        add(
            "error" if engine == "llamacpp" else "warning",
            "dflash-last-layer",
            f"dflash_config.target_layer_ids {config.target_layer_ids} include the target's last layer "
            f"({num_layers - 1}): llama.cpp aborts ('layer input tensor is null'), vLLM feeds the raw state, "
            "transformers (training) the final-normed one.",
            "Train on layers before the last (z-lab's default spreads them over 1..N-3).",
        )
    if config.mask_token_id is None:
        add(
            "error",
            "dflash-mask-id",
            "dflash_config.mask_token_id is absent: llama.cpp's converter writes none and drafts nothing; vLLM refuses.",
            f"In {draft_dir}/config.json write dflash_config.mask_token_id = the id the draft was trained with.",
        )
    if config.rope_theta is None:
        add(
            "warning",
            "dflash-rope-theta",
            "rope_theta is absent from the draft's config.json: the engines here fall back to 10000 (vLLM with an "
            "older transformers to 1e6).",
            f"In {draft_dir}/config.json write rope_theta = the value it was trained with.",
        )
    if engine == "llamacpp":
        add(
            "info",
            "dflash-kv-f16",
            "llama.cpp keeps the draft's KV cache in F16 by default (common/common.h), the replay in the run's dtype.",
            "For a like-for-like comparison add -ctkd f32 -ctvd f32 (and -ctk f32 -ctv f32 for the target).",
        )
    return found
