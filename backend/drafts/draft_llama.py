"""A draft's config as the transformers LlamaConfig its decoder layer is built from, with the checks
transformers leaves to build time. The engine side of draft_config.py (which is plain Python):
reached through `DraftConfig.llama_config` and `DraftConfig.check_buildable`."""

from __future__ import annotations

import torch
from transformers import LlamaConfig

from backend import BadInput, first_line


def llama_config_of(args: dict, where: str) -> LlamaConfig:
    """LlamaConfig(**args); BadInput naming `where` when transformers refuses the settings now or would
    fail only when the layer is built."""
    try:
        config = LlamaConfig(**args)
    except Exception as error:  # transformers validates head counts, sizes, rope settings
        raise BadInput(f"{where} is inconsistent: {str(error).splitlines()[-1].strip()}") from error
    _check_buildable(config, where)
    return config


def _check_buildable(llama_config: LlamaConfig, where: str) -> None:
    """The activation and the RoPE settings the draft layer is built from must exist: transformers
    accepts any string in the config and fails only when the layer is built (KeyError, TypeError)."""
    from transformers.activations import ACT2FN
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    act = llama_config.hidden_act
    if not isinstance(act, str) or act not in ACT2FN:
        raise BadInput(f"{where}: hidden_act {act!r:.60} is not an activation transformers knows")
    params = getattr(llama_config, "rope_parameters", None) or {}
    theta = (
        params.get("rope_theta", getattr(llama_config, "rope_theta", None))
        if isinstance(params, dict)
        else None
    )
    if theta is not None and (isinstance(theta, bool) or not isinstance(theta, int | float) or not theta > 0):
        raise BadInput(f"{where}: rope_theta must be a positive number, got {theta!r:.60}")
    try:
        with torch.device("meta"):  # validation only: nothing is allocated, whatever the sizes
            LlamaRotaryEmbedding(llama_config)
    except Exception as error:  # noqa: BLE001 - a bad rope_theta / rope_scaling / rope_parameters
        reason = first_line(error)
        if isinstance(error, KeyError):
            reason = f"unknown rope type {reason}"
        raise BadInput(f"{where}: its RoPE settings cannot be used ({reason:.200})") from None
