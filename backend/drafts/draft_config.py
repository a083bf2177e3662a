"""Parse an EAGLE-3 draft's config.json into one typed description, whatever layout it came in.

Layouts met in the wild (docs/reference.md §1): SpecForge/SGLang (`LlamaForCausalLMEagle3`,
nested `eagle_config`), EAGLE's own releases (`LlamaForCausalLM`), and vLLM speculators
(`Eagle3Speculator`, the decoder settings nested in `transformer_layer_config`).

Plain Python: the dashboard's server reads drafts with it and imports no torch. The transformers
LlamaConfig the decoder layer is built from, and the checks transformers leaves to build time, are in
draft_llama.py (`DraftConfig.llama_config`, `DraftConfig.check_buildable`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from backend import BadInput
from backend.drafts.json_config import read_json_object

# The variant flags a draft config may declare, kept as declared; what each means is up to the readings
# (backend/drafts/readings.py).
VARIANT_FLAGS = ("fc_norm", "norm_before_fc", "norm_output", "norm_before_residual")
# Every architecture string an engine accepts for an EAGLE-3 draft (docs/reference.md §10).
KNOWN_ARCHITECTURES = (
    "LlamaForCausalLMEagle3",  # SpecForge, SGLang, ModelOpt; vLLM too
    "Eagle3LlamaForCausalLM",  # vLLM's class name; AngelSlim writes it
    "Eagle3Speculator",  # speculators (vLLM reads it through its speculators adapter)
    "Eagle3DraftModel",  # speculators 0.4+ model class
    "LlamaForCausalLM",  # the original EAGLE releases
)


# transformers 5.x folds these into `rope_parameters`; they are not keys of LlamaConfig().to_dict().
ROPE_KEYS = {"rope_theta", "rope_scaling", "rope_parameters"}
# LlamaConfig().to_dict()'s keys, on every transformers the requirements allow (4.57 .. 5.x; the union:
# tests/engine/test_draft_config.py checks the installed one against it), beside the RoPE keys.
LLAMA_KEYS = {
    "attention_bias", "attention_dropout", "head_dim", "hidden_act", "hidden_size", "initializer_range",
    "intermediate_size", "max_position_embeddings", "mlp_bias", "num_attention_heads", "num_hidden_layers",
    "num_key_value_heads", "pretraining_tp", "rms_norm_eps", "tie_word_embeddings", "use_cache", "vocab_size",
    "architectures", "model_type", "bos_token_id", "eos_token_id", "pad_token_id",
    *ROPE_KEYS,
}  # fmt: skip

# Keys SpecLens reads (beyond LlamaConfig's own).
EAGLE_KEYS = {
    "draft_vocab_size",
    "target_hidden_size",
    "eagle_config",
    "eagle_aux_hidden_state_layer_ids",
    "use_aux_hidden_state",
    "transformer_layer_config",
    "architectures",
    "model_type",
    "use_sliding_window",
    "sliding_window",
    *VARIANT_FLAGS,
}

# Config keys by meaning (docs/reference.md §1): used, harmless (with the reason), or needing math
# SpecLens does not have (refused, named first). Anything else is an unknown key: a warning.
GENERIC_HF_KEYS = {  # PretrainedConfig and generation bookkeeping every Hugging Face config may carry
    "add_cross_attention", "bad_words_ids", "begin_suppress_tokens", "chunk_size_feed_forward",
    "cross_attention_hidden_size", "decoder_start_token_id", "diversity_penalty", "do_sample", "early_stopping",
    "encoder_no_repeat_ngram_size", "exponential_decay_length_penalty", "finetuning_task", "forced_bos_token_id",
    "forced_eos_token_id", "id2label", "is_decoder", "is_encoder_decoder", "label2id", "length_penalty",
    "max_length", "min_length", "no_repeat_ngram_size", "num_beam_groups", "num_beams", "num_return_sequences",
    "output_attentions", "output_hidden_states", "output_scores", "prefix", "problem_type", "pruned_heads",
    "remove_invalid_values", "repetition_penalty", "return_dict", "return_dict_in_generate", "sep_token_id",
    "suppress_tokens", "task_specific_params", "temperature", "tf_legacy_loss", "tie_encoder_decoder",
    "tokenizer_class", "top_k", "top_p", "torchscript", "typical_p", "use_bfloat16", "_name_or_path",
    "transformers_version", "torch_dtype", "dtype", "auto_map", "base_model", "_attn_implementation_autoset",
    "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "pretraining_tp", "initializer_range",
    "attention_dropout", "hidden_act", "mlp_bias", "tie_word_embeddings",
}  # fmt: skip
TRAINING_ONLY_KEYS = {  # how the draft was trained or exported; the weights are what counts
    "embed_requires_grad": "training-only (whether the embedding was trained; the saved weights decide)",
    "max_window_layers": "Qwen training bookkeeping (only meaningful with an active sliding window)",
    "target_model_type": "names the target family; the target directory decides",
    "has_no_defaults_at_init": "speculators bookkeeping",
    "speculators_config": "speculators proposal settings (the replay's K and mode come from the request)",
    "speculators_model_type": "speculators format marker",
    "speculators_version": "speculators format marker",
    "layer_types": "per-layer attention kinds of the decoder family (checked with use_sliding_window)",
}
MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
MOE_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")
QK_NORM_LAYER_TYPES = ("qwen3", "qwen3_moe")  # decoder layers with per-head RMSNorm on q and k
MODELOPT_OPTIONS = {  # nested eagle_config options of ModelOpt exports: the standard value, what it changes
    "use_input_layernorm_in_first_layer": (True, "the first layer's input layernorm"),
    "use_last_layernorm": (True, "the final norm before lm_head"),
    "use_mtp_layernorm": (False, "an extra MTP layernorm"),
    "parallel_draft_step": (1, "parallel drafting"),
    "next_layer_regular": (True, "a regular next layer"),
    "parallel_draft_heads_num_layers": (None, "parallel draft heads"),
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
    fc_norm: bool | None  # variant flags as declared (None = absent): readings decide what they mean
    norm_before_fc: bool | None
    norm_output: bool | None
    norm_before_residual: bool | None
    nested_aux_ids: list[int] | None
    top_level_aux_ids: list[int] | None
    llama_args: dict = field(repr=False)  # what the decoder layer's LlamaConfig is built from
    explicit_head_dim: bool = False  # head_dim given in the config (it may differ from hidden / heads)
    layer_model_type: str = "llama"  # the decoder layer's family (speculators: transformer_layer_config)
    speculators_format: bool = False
    declares_draft_vocab_size: bool = True  # the key is there (llama.cpp's converter needs it)
    ignored_keys: dict = field(default_factory=dict)  # key -> why it is harmless
    refused: list = field(default_factory=list)  # why the draft needs math SpecLens does not have
    unknown_keys: list[str] = field(default_factory=list)  # neither used nor known: a warning
    where: str = "draft config.json"  # the file, as every BadInput names it

    @property
    def llama_config(self):
        """The transformers LlamaConfig the draft layer is built from (draft_llama.py: imports
        transformers), made once; BadInput naming the file when transformers cannot build it."""
        built = self.__dict__.get("_llama_config")
        if built is None:
            from backend.drafts.draft_llama import llama_config_of

            built = llama_config_of(self.llama_args, self.where)
            object.__setattr__(self, "_llama_config", built)
        return built

    def __getstate__(self) -> dict:
        """Pickled without the LlamaConfig made from it (a reader job's config then unpickles without
        transformers; it is made again where it is asked for)."""
        return {k: v for k, v in self.__dict__.items() if k != "_llama_config"}

    def check_buildable(self) -> DraftConfig:
        """What only transformers can tell: the layer can be built from these settings (activation, RoPE,
        head counts). Returns self; BadInput naming the file otherwise."""
        _ = self.llama_config
        return self

    @property
    def qk_norm(self) -> bool:
        """Qwen3-style decoder layer: per-head RMSNorm on q and k before RoPE."""
        return self.layer_model_type in QK_NORM_LAYER_TYPES

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
    if not Path(draft_dir).is_dir():
        raise BadInput(
            f"{draft_dir}: no such directory (the draft is a directory with config.json and weights)"
        )
    if not path.is_file():
        raise BadInput(f"{draft_dir}: no config.json (is this an EAGLE-3 draft directory?)")
    return read_json_object(path)


def read_draft_config(draft_dir: str | Path) -> DraftConfig:
    """The parsed config.json of a draft directory; a BadInput names the file by its path."""
    return parse_draft_config(read_config_file(Path(draft_dir)), str(Path(draft_dir) / "config.json"))


def parse_draft_config(raw: dict, where: str = "draft config.json") -> DraftConfig:
    """`raw` read as a DraftConfig; `where` names the file in every BadInput."""
    size = partial(_size, where=where)
    flat = _flatten(raw)
    required = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
    missing = [key for key in required if key not in flat]
    if missing:
        raise BadInput(f"{where} lacks {', '.join(missing)}")
    eagle = flat.get("eagle_config") or {}
    if not isinstance(eagle, dict):
        raise BadInput(f"{where}: eagle_config must be a JSON object, got {eagle!r:.80}")
    hidden = size(flat, "hidden_size")
    heads = size(flat, "num_attention_heads")
    architectures = flat.get("architectures") or ["(none)"]
    if isinstance(architectures, str):  # one name written bare: read it as the list it means
        architectures = [architectures]
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise BadInput(f"{where}: architectures must be a list of class names, got {architectures!r:.80}")

    explicit_head_dim = flat.get("head_dim")
    if not explicit_head_dim and hidden % heads:
        raise BadInput(
            f"{where} is inconsistent: hidden_size {hidden} is not divisible by num_attention_heads "
            f"{heads} (and there is no head_dim)"
        )
    kv_heads = size(flat, "num_key_value_heads", heads)
    if heads % kv_heads:
        raise BadInput(
            f"{where} is inconsistent: num_attention_heads {heads} is not a multiple of "
            f"num_key_value_heads {kv_heads}"
        )
    # Token ids are the target's business (and a draft's ids may exceed its own small vocab).
    ignored = {"architectures", "model_type", "bos_token_id", "eos_token_id", "pad_token_id"}
    for key in (
        "intermediate_size",
        "vocab_size",
        "num_hidden_layers",
        "max_position_embeddings",
        "draft_vocab_size",
    ):
        size(flat, key, None if key in ("intermediate_size", "vocab_size") else 1)  # a clear reason first
    _epsilon(flat, where)
    # null means absent (export templates write nulls); token ids are the target's business
    llama_args = {k: v for k, v in flat.items() if k in LLAMA_KEYS and k not in ignored and v is not None}
    # The draft's RoPE is its own: base 10000 when the config says nothing (never the target's).
    if "rope_theta" not in flat and "rope_parameters" not in flat and "rope_scaling" not in flat:
        llama_args["rope_theta"] = 10000.0

    ignored, refused, unknown = classify_keys(flat, eagle)

    def flag(name: str) -> bool | None:
        value = flat.get(name, eagle.get(name))
        return None if value is None else bool(value)

    layer = raw.get("transformer_layer_config") or {}
    return DraftConfig(
        raw=raw,
        architecture=str(architectures[0]),
        hidden_size=hidden,
        target_hidden_size=size(flat, "target_hidden_size", hidden),
        num_layers=size(flat, "num_hidden_layers", 1),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=size(flat, "head_dim", hidden // heads),
        intermediate_size=size(flat, "intermediate_size"),
        rms_norm_eps=_epsilon(flat, where),
        vocab_size=size(flat, "vocab_size"),
        draft_vocab_size=size(flat, "draft_vocab_size", size(flat, "vocab_size")),
        max_position_embeddings=size(flat, "max_position_embeddings", 2048),
        attention_bias=bool(flat.get("attention_bias", False)),
        use_aux_hidden_state=_use_aux(eagle, flat),
        fc_norm=flag("fc_norm"),
        norm_before_fc=flag("norm_before_fc"),
        norm_output=flag("norm_output"),
        norm_before_residual=flag("norm_before_residual"),
        nested_aux_ids=_int_list(where, eagle.get("eagle_aux_hidden_state_layer_ids")),
        top_level_aux_ids=_int_list(where, raw.get("eagle_aux_hidden_state_layer_ids")),
        llama_args=llama_args,
        explicit_head_dim=bool(explicit_head_dim),
        layer_model_type=str(layer.get("model_type") or flat.get("model_type") or "llama"),
        speculators_format="Eagle3Speculator" in architectures or "speculators_model_type" in raw,
        declares_draft_vocab_size="draft_vocab_size" in flat,
        ignored_keys=ignored,
        refused=refused,
        unknown_keys=unknown,
        where=where,
    )


def classify_keys(flat: dict, eagle: dict) -> tuple[dict, list[str], list[str]]:
    """(harmless keys with the reason, reasons to refuse, unknown keys) of a flattened config."""
    ignored, refused = {}, []
    for key in flat:
        if key in GENERIC_HF_KEYS:
            ignored[key] = "generic Hugging Face config key"
        elif key in TRAINING_ONLY_KEYS:
            ignored[key] = TRAINING_ONLY_KEYS[key]
    mla = [k for k in MLA_KEYS if flat.get(k)]
    if mla:
        refused.append(f"MLA attention ({', '.join(mla)}): SpecLens's draft layer has standard attention")
    moe = [f"{k}={flat[k]}" for k in MOE_KEYS if isinstance(flat.get(k), int) and flat[k] > 0]
    if moe:
        refused.append(
            f"a mixture-of-experts MLP ({', '.join(moe)}): SpecLens's draft layer has one dense MLP"
        )
    window, context = flat.get("sliding_window"), flat.get("max_position_embeddings") or 2048
    if flat.get("use_sliding_window") and isinstance(window, int) and window < context:
        refused.append(
            f"an active sliding window of {window} tokens (use_sliding_window=true, shorter than the draft's "
            f"context {context}): SpecLens's draft attention sees every position"
        )
    for key, (standard, what) in MODELOPT_OPTIONS.items():
        if key not in eagle or eagle[key] is None:
            continue
        value = eagle[key]
        if value == standard or (key == "parallel_draft_heads_num_layers"):
            ignored[f"eagle_config.{key}"] = f"ModelOpt option at its standard value ({value})"
        else:
            refused.append(
                f"eagle_config.{key}={json.dumps(value)} (ModelOpt: changes {what}); SpecLens implements "
                "the standard EAGLE-3 layer"
            )
    unknown = sorted(
        k
        for k in flat
        if k not in LLAMA_KEYS | EAGLE_KEYS | set(MLA_KEYS) | set(MOE_KEYS) and k not in ignored
    )
    return ignored, refused, unknown


def _size(flat: dict, key: str, default: int | None = None, *, where: str) -> int:
    """A positive integer field; absent or null takes the default (required when None)."""
    value = flat.get(key)
    if value is None:
        if default is None:
            raise BadInput(f"{where}: {key} is missing or null")
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 1:
        raise BadInput(f"{where}: {key} must be a positive integer, got {value!r}")
    return int(value)


def _epsilon(flat: dict, where: str) -> float:
    value = flat.get("rms_norm_eps")
    if value is None:
        return 1e-6
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise BadInput(f"{where}: rms_norm_eps must be a small positive number, got {value!r}")
    return float(value)


def _use_aux(eagle: dict, flat: dict) -> bool:
    """use_aux_hidden_state, nested first; absent or null means true (EAGLE-3)."""
    value = eagle.get("use_aux_hidden_state", flat.get("use_aux_hidden_state"))
    return True if value is None else bool(value)


def _int_list(where: str, value) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        raise BadInput(f"{where}: eagle_aux_hidden_state_layer_ids must be a list of integers, got {value!r}")
    if len(value) != 3:
        raise BadInput(
            f"{where}: eagle_aux_hidden_state_layer_ids {value}: EAGLE-3 fuses exactly three target states; "
            f"got {len(value)} indices"
        )
    return list(value)
