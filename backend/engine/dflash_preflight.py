"""Preflight of a DFlash draft against a target's config: each finding names the field and the value
to write (the readings and their traps: backend/drafts/dflash_readings.py)."""

from __future__ import annotations

from pathlib import Path

from backend import BadInput
from backend.drafts.dflash_config import DFlashConfig, parse_dflash_config
from backend.drafts.engine_table import Check
from backend.drafts.json_config import read_json_object
from backend.drafts.readings import dflash_view
from backend.engine.preflight_report import PreflightReport
from backend.run.engine_names import SERVING_ENGINES


def dflash_preflight(draft_dir: str | Path, target_config, num_steps: int | None = None):
    """The checks of the DFlash draft in `draft_dir` for a target of `target_config` (and, given
    `num_steps`, the K it will be served with), as (checks: (name, status, message), wiring, each
    serving engine's view); preflight.py makes them its PreflightReport."""
    draft_dir = Path(draft_dir)
    where = draft_dir / "config.json"
    checks: list[tuple[str, str, str]] = []
    add = lambda name, status, message: checks.append((name, status, message))  # noqa: E731
    try:
        config = parse_dflash_config(read_json_object(where), str(where))
    except BadInput as error:
        return [("config", "fail", str(error))], None, {}
    layers, vocab = target_config.num_hidden_layers, target_config.vocab_size
    add(
        "method",
        "pass",
        f"DFlash draft ({config.architecture}), block_size {config.block_size}, {config.num_layers} layers",
    )
    if config.hidden_size != target_config.hidden_size:
        add(
            "hidden size",
            "fail",
            f"hidden_size {config.hidden_size}; the target's is {target_config.hidden_size}: a DFlash draft shares the "
            f"target's embeddings and head, write hidden_size = {target_config.hidden_size}",
        )
    _check_layers(config, layers, add)
    _check_mask(config, vocab, add)
    if config.rope_theta is None:
        theta = target_rope_theta(target_config)
        add(
            "rope_theta",
            "warn",
            "rope_theta is absent from config.json: z-lab, vLLM and llama.cpp here all fall back to 10000 (vLLM with "
            f"older transformers to 1e6); write the value it was trained with (the target's is {theta}: "
            "preflight --engine ENGINE --write-fix OUT writes that copy)",
        )
    if num_steps is not None and num_steps != config.num_drafts:
        add(
            "block length",
            "warn",
            f"served with K = {num_steps} (a block of {num_steps + 1}); trained on block_size {config.block_size}: "
            f"attention runs both ways inside the block, so every draft changes with K; serve K = {config.num_drafts} "
            f"(vLLM num_speculative_tokens = {config.num_drafts}, llama.cpp --spec-draft-n-max {config.num_drafts})",
        )
    engines = {name: dflash_view(name, config, layers) for name in SERVING_ENGINES}
    for name, view in engines.items():
        if view.refusal:
            add("engines", "warn", f"{name}: {view.refusal}")
    wiring = engines["sglang"].wiring
    try:
        from backend.engine.loading import read_draft_tensors

        tensors, weights_file = read_draft_tensors(draft_dir)
        add("files", "pass", f"read {weights_file} ({len(tensors)} tensors)")
    except BadInput as error:
        add("files", "fail", str(error))
    return checks, wiring, engines


def target_rope_theta(target_config) -> float | None:
    return getattr(target_config, "rope_theta", None) or (
        getattr(target_config, "rope_parameters", None) or {}
    ).get("rope_theta")


def dflash_config_fix(draft_dir: str | Path, target_config) -> tuple[dict, str | None]:
    """What `preflight --write-fix` writes into a DFlash draft's config.json, and in words: the
    findings whose value is known without the weights' history. rope_theta absent: the target's (z-lab's
    and SpecForge's drafts are built from the target's config and train with it; each engine falls
    back to another value). The target layers are the layer probe's to fix (`probe --write-fix`); a
    mask id or hidden size the weights disagree with needs retraining, not a config line."""
    where = Path(draft_dir) / "config.json"
    config = parse_dflash_config(read_json_object(where), str(where))
    theta = target_rope_theta(target_config)
    if config.rope_theta is None and theta is not None:
        return {"rope_theta": theta}, (
            f"rope_theta = {theta} (the target's: the draft was built from its config; the engines fall "
            "back to 10000 or 1e6 without it)"
        )
    return {}, None


def _check_layers(config: DFlashConfig, layers: int, add) -> None:
    ids, hf = config.target_layer_ids, list(config.aux_hf_indices)
    past = [i for i in ids if i >= layers]
    if past:
        add(
            "target layers",
            "fail",
            f"dflash_config.target_layer_ids {ids} names layers past the target's {layers} (z-lab ids 0..{layers - 1}); "
            f"if these are HF hidden_states indices, write {[i - 1 for i in ids]}",
        )
        return
    said = f"dflash_config.target_layer_ids {ids} (z-lab ids) read as HF hidden_states {hf} by every engine"
    if layers - 1 in ids:
        add(
            "target layers",
            "warn",
            f"{said}; layer {layers - 1} is the target's last: llama.cpp aborts, vLLM feeds its raw output, "
            "transformers (training) the final-normed one. Train on a layer before it",
        )
    else:
        add("target layers", "pass", said)


def _check_mask(config: DFlashConfig, vocab: int, add) -> None:
    mask = config.mask_token_id
    if mask is None:
        add(
            "mask token",
            "fail",
            "dflash_config.mask_token_id is absent: write the id the draft was trained with (llama.cpp's converter "
            "reads only dflash_config.mask_token_id)",
        )
    elif mask >= vocab:
        add(
            "mask token",
            "fail",
            f"dflash_config.mask_token_id {mask} is past the target's embedding ({vocab} rows; SpecForge adds a token "
            "past the tokenizer when it finds none): llama.cpp reads it as -1 and drafts nothing, vLLM and z-lab fail; "
            f"write an id below {vocab} and retrain, or ship mask_embedding.pt",
        )
    else:
        add(
            "mask token",
            "pass",
            f"dflash_config.mask_token_id {mask} indexes the target's embedding ({vocab} rows)",
        )


def dflash_report(draft_dir, target_config) -> PreflightReport:
    """A DFlash draft's preflight (backend/engine/dflash_preflight.py) as a PreflightReport."""
    checks, wiring, engines = dflash_preflight(draft_dir, target_config)
    return PreflightReport([Check(*c) for c in checks], wiring, engines, training_engine="specforge")
