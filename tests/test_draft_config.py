"""Draft config parsing: the draft's own RoPE, layouts, and unknown keys."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from backend import BadInput
from backend.draft_config import parse_draft_config
from backend.draft_model import Eagle3Draft

# Shaped like the original EAGLE-3 release for Llama-3.1-8B (sizes shrunk).
EAGLE_RELEASE = {
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
    "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
    "max_position_embeddings": 2048, "model_type": "llama", "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 1, "pad_token_id": 0, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.28.1", "use_cache": True,
    "vocab_size": 1000, "draft_vocab_size": 320,
}


def inv_freq(config: dict) -> torch.Tensor:
    return Eagle3Draft(parse_draft_config(config), target_embedding=None).rotary.inv_freq


def test_draft_rope_comes_from_its_own_config():
    parsed = parse_draft_config(EAGLE_RELEASE)
    assert parsed.rope_description == "theta=500000.0, type=llama3"
    assert not parsed.unknown_flags and not parsed.unknown_keys
    reference = LlamaRotaryEmbedding(LlamaConfig(hidden_size=64, num_attention_heads=4, rope_theta=500000.0,
                                                 rope_scaling=EAGLE_RELEASE["rope_scaling"]))
    assert torch.allclose(inv_freq(EAGLE_RELEASE), reference.inv_freq)


def test_rope_theta_defaults_to_10000_never_the_targets():
    bare = {k: v for k, v in EAGLE_RELEASE.items() if k not in ("rope_theta", "rope_scaling")}
    head_dim = 16
    expected = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    assert torch.allclose(inv_freq(bare), expected)
    assert parse_draft_config(bare).rope_description == "theta=10000.0, type=default"


def test_rope_frequencies_stay_fp32_when_the_draft_is_cast():
    draft = Eagle3Draft(parse_draft_config(EAGLE_RELEASE), target_embedding=None).to(torch.bfloat16)
    assert draft.rotary.inv_freq.dtype == torch.float32 and draft.fc.weight.dtype == torch.bfloat16


def test_speculators_layout_is_lifted():
    parsed = parse_draft_config({"architectures": ["Eagle3Speculator"], "draft_vocab_size": 300,
                                 "target_hidden_size": 64, "norm_before_residual": True,
                                 "eagle_aux_hidden_state_layer_ids": [2, 16, 29],
                                 "transformer_layer_config": {k: EAGLE_RELEASE[k] for k in (
                                     "hidden_size", "intermediate_size", "num_attention_heads",
                                     "num_key_value_heads", "vocab_size", "rms_norm_eps")}})
    assert parsed.architecture == "Eagle3Speculator" and parsed.norm_before_residual
    assert parsed.top_level_aux_ids == [2, 16, 29] and parsed.nested_aux_ids is None
    assert parsed.hidden_size == 64 and parsed.draft_vocab_size == 300


def test_unknown_boolean_is_a_flag_and_bad_ids_are_refused():
    parsed = parse_draft_config({**EAGLE_RELEASE, "norm_after_fc": True, "my_note": "x"})
    assert parsed.unknown_flags == {"norm_after_fc": True} and parsed.unknown_keys == ["my_note"]
    with pytest.raises(BadInput, match="list of integers"):
        parse_draft_config({**EAGLE_RELEASE, "eagle_aux_hidden_state_layer_ids": "2,16,29"})
    with pytest.raises(BadInput, match="lacks hidden_size"):
        parse_draft_config({"architectures": ["LlamaForCausalLMEagle3"]})
