"""Draft config parsing: the draft's own RoPE, layouts, and unknown keys."""

from __future__ import annotations

import pytest

from backend import BadInput

# Shaped like the original EAGLE-3 release for Llama-3.1-8B (sizes shrunk).
EAGLE_RELEASE = {
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "hidden_act": "silu",
    "hidden_size": 64,
    "initializer_range": 0.02,
    "intermediate_size": 128,
    "max_position_embeddings": 2048,
    "model_type": "llama",
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.28.1",
    "use_cache": True,
    "vocab_size": 1000,
    "draft_vocab_size": 320,
}


def parse(config: dict):
    from backend.drafts.draft_config import parse_draft_config  # transformers: imported when used

    return parse_draft_config(config)


def inv_freq(config: dict):
    from backend.engine.draft_model import Eagle3Draft

    return Eagle3Draft(parse(config), target_embedding=None).rotary.inv_freq


def test_draft_rope_comes_from_its_own_config():
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    parsed = parse(EAGLE_RELEASE)
    assert parsed.rope_description == "theta=500000.0, type=llama3"
    assert not parsed.refused and not parsed.unknown_keys
    reference = LlamaRotaryEmbedding(
        LlamaConfig(
            hidden_size=64,
            num_attention_heads=4,
            rope_theta=500000.0,
            rope_scaling=EAGLE_RELEASE["rope_scaling"],
        )
    )
    assert torch.allclose(inv_freq(EAGLE_RELEASE), reference.inv_freq)


def test_rope_theta_defaults_to_10000_never_the_targets():
    import torch

    bare = {k: v for k, v in EAGLE_RELEASE.items() if k not in ("rope_theta", "rope_scaling")}
    head_dim = 16
    expected = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    assert torch.allclose(inv_freq(bare), expected)
    assert parse(bare).rope_description == "theta=10000.0, type=default"


def test_speculators_layout_is_lifted():
    parsed = parse(
        {
            "architectures": ["Eagle3Speculator"],
            "draft_vocab_size": 300,
            "target_hidden_size": 64,
            "norm_before_residual": True,
            "eagle_aux_hidden_state_layer_ids": [2, 16, 29],
            "transformer_layer_config": {
                k: EAGLE_RELEASE[k]
                for k in (
                    "hidden_size",
                    "intermediate_size",
                    "num_attention_heads",
                    "num_key_value_heads",
                    "vocab_size",
                    "rms_norm_eps",
                )
            },
        }
    )
    assert parsed.architecture == "Eagle3Speculator" and parsed.norm_before_residual
    assert parsed.top_level_aux_ids == [2, 16, 29] and parsed.nested_aux_ids is None
    assert parsed.hidden_size == 64 and parsed.draft_vocab_size == 300


def test_config_keys_by_meaning_and_bad_ids_are_refused():
    """Unknown keys are warnings whatever their type; harmless keys carry a reason; math SpecLens
    lacks is refused with the reason."""
    parsed = parse(
        {
            **EAGLE_RELEASE,
            "norm_after_fc": True,
            "my_note": "x",
            "use_sliding_window": False,
            "sliding_window": None,
            "embed_requires_grad": False,
            "do_sample": False,
            "torchscript": False,
        }
    )
    assert parsed.unknown_keys == ["my_note", "norm_after_fc"] and not parsed.refused
    assert "training-only" in parsed.ignored_keys["embed_requires_grad"]
    assert (
        parsed.ignored_keys["do_sample"]
        == parsed.ignored_keys["torchscript"]
        == "generic Hugging Face config key"
    )
    mla = parse({**EAGLE_RELEASE, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64})
    assert mla.refused and mla.refused[0].startswith(
        "MLA attention (kv_lora_rank, q_lora_rank, qk_rope_head_dim)"
    )
    window = parse({**EAGLE_RELEASE, "use_sliding_window": True, "sliding_window": 1024})
    assert "an active sliding window of 1024 tokens" in window.refused[0]
    assert not parse({**EAGLE_RELEASE, "use_sliding_window": True, "sliding_window": 1 << 20}).refused
    moe = parse({**EAGLE_RELEASE, "num_experts": 8})
    assert "mixture-of-experts" in moe.refused[0]
    with pytest.raises(BadInput, match="list of integers"):
        parse({**EAGLE_RELEASE, "eagle_aux_hidden_state_layer_ids": "2,16,29"})
    with pytest.raises(BadInput, match="lacks hidden_size"):
        parse({"architectures": ["LlamaForCausalLMEagle3"]})


def test_inconsistent_sizes_are_bad_input():
    with pytest.raises(BadInput, match="inconsistent"):
        parse({**EAGLE_RELEASE, "hidden_size": 999})


@pytest.mark.parametrize(
    "edit, reason",
    [
        ({"hidden_size": "abc"}, "hidden_size must be a positive integer, got 'abc'"),
        ({"draft_vocab_size": -1}, "draft_vocab_size must be a positive integer"),
        ({"vocab_size": -1}, "vocab_size must be a positive integer"),
        ({"intermediate_size": None}, "intermediate_size is missing or null"),
        ({"rms_norm_eps": "x"}, "rms_norm_eps must be a small positive number"),
    ],
)
def test_bad_sizes_are_bad_input_naming_the_field(edit, reason):
    with pytest.raises(BadInput, match=reason):
        parse({**EAGLE_RELEASE, **edit})


def test_nulls_mean_absent_as_export_templates_write_them():
    parsed = parse(
        {
            **EAGLE_RELEASE,
            "rms_norm_eps": None,
            "max_position_embeddings": None,
            "head_dim": None,
            "eagle_config": {"use_aux_hidden_state": None, "eagle_aux_hidden_state_layer_ids": None},
        }
    )
    assert (
        parsed.use_aux_hidden_state and parsed.rms_norm_eps == 1e-6 and parsed.max_position_embeddings == 2048
    )
    assert parsed.nested_aux_ids is None and not parsed.explicit_head_dim


def test_the_plain_key_list_covers_the_installed_llama_config():
    """draft_config.py classifies keys without transformers (the dashboard's server imports none): its
    list must hold every key the installed LlamaConfig has (run on the floor and the newest release)."""
    from transformers import LlamaConfig

    from backend.drafts.draft_config import GENERIC_HF_KEYS, LLAMA_KEYS

    missing = set(LlamaConfig().to_dict()) - LLAMA_KEYS - GENERIC_HF_KEYS
    assert not missing, f"add to draft_config.LLAMA_KEYS: {sorted(missing)}"


def test_parsing_a_draft_config_imports_neither_torch_nor_transformers(tmp_path):
    """Config parsing is plain Python; what only transformers can check waits for check_buildable."""
    import json
    import subprocess
    import sys

    (tmp_path / "config.json").write_text(json.dumps({**EAGLE_RELEASE, "hidden_act": "nope"}))
    code = (
        "import sys\nfrom backend.drafts.draft_config import read_draft_config\n"
        f"config = read_draft_config({str(tmp_path)!r})\n"
        "print(config.hidden_size, sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
        "try:\n    config.check_buildable()\nexcept ValueError as error:\n    print('refused:', error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    first, second = out.splitlines()
    assert first == f"{EAGLE_RELEASE['hidden_size']} []"
    assert second.startswith(f"refused: {tmp_path / 'config.json'}: hidden_act 'nope'")
