"""Parse an EAGLE-3 draft's config.json into one typed description, whatever layout it came in.

Layouts met in the wild (docs/reference.md §1): SpecForge/SGLang (`LlamaForCausalLMEagle3`,
nested `eagle_config`), EAGLE's own releases (`LlamaForCausalLM`), and vLLM speculators
(`Eagle3Speculator`, the decoder settings nested in `transformer_layer_config`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from transformers import LlamaConfig

from backend import BadInput

KNOWN_ARCHITECTURES = ("LlamaForCausalLMEagle3", "LlamaForCausalLM", "Eagle3Speculator")

# Variant flags that change the draft's math; every one is implemented in draft_model.py.
VARIANT_FLAGS = {
    "fc_norm": False,  # per-chunk RMSNorm on each of the three target states before fc
    "norm_before_fc": False,  # one RMSNorm over the 3*Ht concatenation before fc
    "norm_output": True,  # apply `norm` before lm_head
    "norm_before_residual": False,  # the residual around attention is the normed hidden
}

# transformers 5.x folds these into `rope_parameters`; they are not keys of LlamaConfig().to_dict().
ROPE_KEYS = {"rope_theta", "rope_scaling", "rope_parameters"}

# Keys that are not LlamaConfig fields but are understood (or harmless bookkeeping).
EAGLE_KEYS = {
    "draft_vocab_size",
    "target_hidden_size",
    "eagle_config",
    "eagle_aux_hidden_state_layer_ids",
    "use_aux_hidden_state",
    "transformer_layer_config",
    "speculators_config",
    "speculators_model_type",
    "speculators_version",
    "has_no_defaults_at_init",
    "torch_dtype",
    "dtype",
    "transformers_version",
    "architectures",
    "model_type",
    "_name_or_path",
    "target_model_type",
    "auto_map",
    "base_model",
    *VARIANT_FLAGS,
}


@dataclass(frozen=True)
class DraftConfig:
    raw: dict
    architecture: str
    hidden_size: int
    target_hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    vocab_size: int
    draft_vocab_size: int
    max_position_embeddings: int
    attention_bias: bool
    use_aux_hidden_state: bool
    fc_norm: bool
    norm_before_fc: bool
    norm_output: bool
    norm_before_residual: bool
    nested_aux_ids: list[int] | None
    top_level_aux_ids: list[int] | None
    llama_config: LlamaConfig = field(repr=False)
    unknown_flags: dict = field(default_factory=dict)
    unknown_keys: list[str] = field(default_factory=list)

    @property
    def rope_description(self) -> str:
        # transformers 5.x keeps RoPE settings in `rope_parameters`; 4.x in rope_theta / rope_scaling.
        params = getattr(self.llama_config, "rope_parameters", None) or getattr(
            self.llama_config, "rope_scaling", None
        )
        params = params or {}
        theta = params.get("rope_theta", getattr(self.llama_config, "rope_theta", None))
        kind = params.get("rope_type", params.get("type", "default"))
        return f"theta={theta}, type={kind}"


def _flatten(raw: dict) -> dict:
    """Speculators nest the decoder settings; lift them so one parser reads every layout."""
    merged = dict(raw.get("transformer_layer_config") or {})
    merged.update({k: v for k, v in raw.items() if k != "transformer_layer_config"})
    return merged


def read_config_file(draft_dir: Path) -> dict:
    path = Path(draft_dir) / "config.json"
    if not path.is_file():
        raise BadInput(f"{draft_dir}: no config.json (is this an EAGLE-3 draft directory?)")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise BadInput(f"{path}: not valid JSON ({error})") from error
    if not isinstance(raw, dict):
        raise BadInput(f"{path}: expected a JSON object")
    return raw


def parse_draft_config(raw: dict) -> DraftConfig:
    flat = _flatten(raw)
    required = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
    missing = [key for key in required if key not in flat]
    if missing:
        raise BadInput(f"draft config.json lacks {', '.join(missing)}")
    eagle = flat.get("eagle_config") or {}
    hidden = int(flat["hidden_size"])
    heads = int(flat["num_attention_heads"])
    architectures = flat.get("architectures") or ["(none)"]

    explicit_head_dim = flat.get("head_dim")
    if not explicit_head_dim and hidden % heads:
        raise BadInput(
            f"draft config.json is inconsistent: hidden_size {hidden} is not divisible by num_attention_heads "
            f"{heads} (and there is no head_dim)"
        )
    kv_heads = int(flat.get("num_key_value_heads") or heads)
    if heads % kv_heads:
        raise BadInput(
            f"draft config.json is inconsistent: num_attention_heads {heads} is not a multiple of "
            f"num_key_value_heads {kv_heads}"
        )
    llama_keys = set(LlamaConfig().to_dict()) | ROPE_KEYS
    # Token ids are the target's business (and a draft's ids may exceed its own small vocab).
    ignored = {"architectures", "model_type", "bos_token_id", "eos_token_id", "pad_token_id"}
    llama_args = {k: v for k, v in flat.items() if k in llama_keys and k not in ignored}
    # The draft's RoPE is its own: base 10000 when the config says nothing (never the target's).
    if "rope_theta" not in flat and "rope_parameters" not in flat and "rope_scaling" not in flat:
        llama_args["rope_theta"] = 10000.0
    try:
        llama_config = LlamaConfig(**llama_args)
    except Exception as error:  # noqa: BLE001 - transformers validates head counts, sizes, rope settings
        raise BadInput(f"draft config.json is inconsistent: {str(error).splitlines()[-1].strip()}") from error

    unknown = [k for k in flat if k not in llama_keys and k not in EAGLE_KEYS]
    unknown_flags = {k: flat[k] for k in unknown if isinstance(flat[k], bool)}

    def flag(name: str) -> bool:
        return bool(flat.get(name, eagle.get(name, VARIANT_FLAGS[name])))

    return DraftConfig(
        raw=raw,
        architecture=str(architectures[0]),
        hidden_size=hidden,
        target_hidden_size=int(flat.get("target_hidden_size") or hidden),
        num_layers=int(flat.get("num_hidden_layers", 1)),
        num_attention_heads=heads,
        num_key_value_heads=int(flat.get("num_key_value_heads") or heads),
        head_dim=int(flat.get("head_dim") or hidden // heads),
        intermediate_size=int(flat["intermediate_size"]),
        rms_norm_eps=float(flat.get("rms_norm_eps", 1e-6)),
        vocab_size=int(flat["vocab_size"]),
        draft_vocab_size=int(flat.get("draft_vocab_size") or flat["vocab_size"]),
        max_position_embeddings=int(flat.get("max_position_embeddings", 2048)),
        attention_bias=bool(flat.get("attention_bias", False)),
        use_aux_hidden_state=bool(eagle.get("use_aux_hidden_state", flat.get("use_aux_hidden_state", True))),
        fc_norm=flag("fc_norm"),
        norm_before_fc=flag("norm_before_fc"),
        norm_output=flag("norm_output"),
        norm_before_residual=flag("norm_before_residual"),
        nested_aux_ids=_int_list(eagle.get("eagle_aux_hidden_state_layer_ids")),
        top_level_aux_ids=_int_list(raw.get("eagle_aux_hidden_state_layer_ids")),
        llama_config=llama_config,
        unknown_flags=unknown_flags,
        unknown_keys=[k for k in unknown if k not in unknown_flags],
    )


def _int_list(value) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        raise BadInput(f"eagle_aux_hidden_state_layer_ids must be a list of integers, got {value!r}")
    return list(value)
