"""A serving command read as the engine reads it: SGLang launch flags or vLLM arguments (with its
--speculative-config), the environment knobs before them, the feature flags that cost acceptance,
and the target facts the rules need from its config.json. Torch-free (the lint runs inline on pages).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from backend import BadInput
from backend.drafts.json_config import config_sizes, read_json_object

# Flags (as the engines spell them) -> the feature they turn on. A value of None: the flag takes no
# value. SGLang: python/sglang/srt/server_args.py; vLLM: vllm/engine/arg_utils.py.
SGLANG_FEATURE_FLAGS = {
    "--enable-lora": ("lora", None),
    "--lora-paths": ("lora", str),
    "--disaggregation-mode": ("disaggregation", str),
}
VLLM_FEATURE_FLAGS = {
    "--enable-lora": ("lora", None),
    "--lora-modules": ("lora", str),
    "--kv-transfer-config": ("kv_transfer", str),
    "--no-enable-prefix-caching": ("prefix_caching_off", None),
    "--generation-config": ("generation_config", str),
    "--override-generation-config": ("override_generation_config", str),
}


def feature_flags(words: list[str], engine: str) -> dict:
    """The feature flags among a command line's words: {feature: value as written (True: no value)}."""
    table = SGLANG_FEATURE_FLAGS if engine == "sglang" else VLLM_FEATURE_FLAGS
    found: dict = {}
    for index, word in enumerate(words):
        flag, _, inline = word.partition("=")
        if flag not in table:
            continue
        name, kind = table[flag]
        if kind is None:
            found[name] = True
            continue
        value = inline or (words[index + 1] if index + 1 < len(words) else "")
        if not value or value.startswith("--"):
            raise BadInput(f"{flag} needs a value")
        found[name] = value
    return found


def is_hybrid(config: dict) -> bool:
    """A target mixing attention with linear-attention / state-space layers (layer_types, Jamba- and
    Nemotron-H-style patterns)."""
    kinds = config.get("layer_types") or config.get("layers_block_type")
    if isinstance(kinds, list) and len({str(k) for k in kinds}) > 1:
        return any("attention" not in str(k) or "linear" in str(k) for k in kinds)
    pattern = config.get("hybrid_override_pattern")
    return isinstance(pattern, str) and len(set(pattern)) > 1


@dataclass
class ServingSettings:
    """What the command line asks for (None = not given) and, after `effective_*`, what runs."""

    engine: str  # sglang | vllm
    algorithm: str | None = None
    draft_path: str | None = None
    target_path: str | None = None
    num_steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    token_map: str | None = None
    context_length: int | None = None
    max_running_requests: int | None = None
    mixed_chunk: bool = False
    # Benchmark knobs that replace the draft's acceptance with a made-up one, or vary K with load
    # (name -> value as written): the served numbers are then not the draft's.
    knobs: dict = field(default_factory=dict)
    # Features that cost acceptance (serving_features.feature_flags) and vLLM's speculative config.
    features: dict = field(default_factory=dict)
    spec: dict = field(default_factory=dict)


@dataclass(frozen=True)
class TargetFacts:
    architecture: str | None
    num_layers: int | None
    max_position_embeddings: int | None
    hybrid: bool = False  # attention mixed with linear-attention / state-space layers
    directory: str | None = None  # a local model directory (its generation_config.json is read)


SGLANG_FLAGS = {
    "--speculative-algorithm": ("algorithm", str),
    "--speculative-draft-model-path": ("draft_path", str),
    "--speculative-draft-model": ("draft_path", str),
    "--speculative-num-steps": ("num_steps", int),
    "--speculative-eagle-topk": ("topk", int),
    "--speculative-num-draft-tokens": ("num_draft_tokens", int),
    "--speculative-token-map": ("token_map", str),
    "--model-path": ("target_path", str),
    "--model": ("target_path", str),
    "--context-length": ("context_length", int),
    "--max-running-requests": ("max_running_requests", int),
}


def split_command(command: str) -> list[str]:
    try:
        return shlex.split(command.replace("\\\n", " "))
    except ValueError as error:
        raise BadInput(f"cannot split the command line: {error}") from error


MAX_FLAG_INT = 2**31 - 1  # the engines parse these into 32-bit fields (and no draft runs more)


def _convert(flag: str, kind, value: str):
    """A flag's value as the engine's argument parser types it; every integer these flags take
    (steps, topk, draft tokens, context, running requests) is positive."""
    try:
        converted = kind(value)
    except ValueError as error:
        raise BadInput(f"{flag} expects an integer, got {value!r}") from error
    if kind is int and not 1 <= converted <= MAX_FLAG_INT:
        raise BadInput(f"{flag} must be a positive integer (1..{MAX_FLAG_INT}), got {value}")
    return converted


# SGLang environment/envs.py: SGLANG_SIMULATE_ACC_LEN > 0 makes the verify step accept a simulated
# number of drafts (a benchmark of the serving path, not of the draft); given as VAR=value words.
SGLANG_SIMULATED = ("SGLANG_SIMULATE_ACC_LEN",)
# vllm/config/speculative.py SpeculativeConfig: rejection_sample_method "synthetic" accepts drafts at
# synthetic_acceptance_rates / _length instead of checking them; num_speculative_tokens_per_batch_size
# changes K with the batch size (vllm/v1/spec_decode/dynamic/utils.py).
VLLM_SYNTHETIC_KEYS = ("rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length")
VLLM_K_BY_LOAD = "num_speculative_tokens_per_batch_size"


def parse_sglang(command: str) -> ServingSettings:
    settings = ServingSettings("sglang")
    words = split_command(command)
    index = 0
    while index < len(words):
        word = words[index]
        flag, _, inline = word.partition("=")
        if flag in SGLANG_SIMULATED and inline.strip() not in ("", "0", "0.0"):
            settings.knobs[flag] = inline
        if flag == "--enable-mixed-chunk":
            settings.mixed_chunk = True
        elif flag in SGLANG_FLAGS:
            name, kind = SGLANG_FLAGS[flag]
            if not inline:
                index += 1
                if index >= len(words) or words[index].startswith("--"):
                    raise BadInput(f"{flag} needs a value")
                inline = words[index]
            setattr(settings, name, _convert(flag, kind, inline))
        index += 1
    if settings.algorithm is None:
        raise BadInput("no --speculative-algorithm in the command: speculative decoding is off")
    settings.algorithm = settings.algorithm.upper()
    settings.features = feature_flags(words, "sglang")
    return settings


def parse_vllm(arguments: str) -> ServingSettings:
    settings = ServingSettings("vllm")
    words = split_command(arguments)
    spec_config = None
    for index, word in enumerate(words):
        flag, _, inline = word.partition("=")
        value = inline or (words[index + 1] if index + 1 < len(words) else None)
        if flag in ("--speculative-config", "--speculative_config"):
            spec_config = value
        elif flag in ("--max-model-len", "--max_model_len") and value is not None:
            settings.context_length = _convert(flag, int, value)
        elif flag == "--model" and value is not None:
            settings.target_path = value
        elif flag == "serve" and index + 1 < len(words) and not words[index + 1].startswith("-"):
            settings.target_path = words[index + 1]
    if spec_config is None:
        raise BadInput("no --speculative-config in the arguments: speculative decoding is off")
    try:
        spec = json.loads(spec_config)
    except json.JSONDecodeError as error:
        raise BadInput(f"--speculative-config is not valid JSON ({error})") from error
    if not isinstance(spec, dict):
        raise BadInput("--speculative-config must be a JSON object")
    settings.algorithm = str(spec.get("method", "")).lower() or None
    settings.draft_path = spec.get("model")
    if settings.draft_path is not None and not isinstance(settings.draft_path, str):
        raise BadInput(
            f"--speculative-config: model must be the draft's path, got {settings.draft_path!r:.60}"
        )
    if spec.get("num_speculative_tokens") is not None:
        settings.num_steps = _convert("num_speculative_tokens", int, str(spec["num_speculative_tokens"]))
    settings.knobs = _vllm_knobs(spec)
    settings.features = feature_flags(words, "vllm")
    settings.spec = spec
    return settings


def _vllm_knobs(spec: dict) -> dict:
    """The benchmark knobs a --speculative-config sets (VLLM_SYNTHETIC_KEYS, VLLM_K_BY_LOAD)."""
    knobs = {}
    if str(spec.get("rejection_sample_method", "standard")).lower() == "synthetic" or any(
        spec.get(key) is not None for key in VLLM_SYNTHETIC_KEYS[1:]
    ):
        knobs.update({k: spec[k] for k in VLLM_SYNTHETIC_KEYS if spec.get(k) is not None})
    if spec.get(VLLM_K_BY_LOAD) is not None:
        knobs[VLLM_K_BY_LOAD] = spec[VLLM_K_BY_LOAD]
    return knobs


def target_facts(target_dir: str | Path | None, explicit: bool = False) -> TargetFacts:
    """The target's architecture, depth and context from its config.json. A target the user named
    (--target) must be a readable model directory; one the serving command names may be a hub id
    (then nothing is known), but a local directory it names must be readable too."""
    if not target_dir:
        return TargetFacts(None, None, None)
    path = Path(target_dir) / "config.json"
    if not path.is_file():
        if explicit:
            raise BadInput(f"--target {target_dir}: not a local model directory (no config.json)")
        return TargetFacts(None, None, None)
    raw = read_json_object(path)
    sizes = config_sizes(raw, path, ("num_hidden_layers", "max_position_embeddings"))
    architectures = raw.get("architectures")
    if isinstance(architectures, list):
        architectures = architectures[0] if architectures else None
    return TargetFacts(
        architectures if isinstance(architectures, str) else None,
        sizes["num_hidden_layers"],
        sizes["max_position_embeddings"],
        is_hybrid(raw),
        str(target_dir),
    )
