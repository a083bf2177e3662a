"""Targets beyond Llama (tiny random configs built with transformers' own config classes): the
replay equals plain greedy decoding, and the captured HF indices are `hidden_states[k]`, index 0
included (the input of layer 0, whatever the model does to its embeddings)."""

from __future__ import annotations

import pytest

COMMON = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)
FAMILIES = {  # name: (config class, model class, extra config), sliding windows shorter than the replay
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=16)),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        dict(
            head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1
        ),
    ),
    "gpt_oss": (
        "GptOssConfig",
        "GptOssForCausalLM",
        dict(
            head_dim=16,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"] * 3,
        ),
    ),
    "deepseek_v3": (  # MLA attention + MoE
        "DeepseekV3Config",
        "DeepseekV3ForCausalLM",
        dict(
            num_key_value_heads=4,
            kv_lora_rank=16,
            q_lora_rank=24,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=16,
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
        ),
    ),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(head_dim=16, sliding_window=8)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(head_dim=16, sliding_window=8)),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_replay_and_capture_on_other_families(family, tmp_path):
    import torch
    import transformers

    from backend.engine.loading import load_target
    from backend.engine.preflight import load_checked_draft
    from backend.engine.replay import ReplayConfig, output_ids_of, replay
    from backend.target.capture import AuxCapture
    from tests.support.oracle import plain_greedy
    from tests.support.synthetic import draft_config_dict, random_draft_tensors, save_draft

    config_name, model_name, extra = FAMILIES[family]
    if not hasattr(transformers, model_name):
        pytest.skip(f"transformers {transformers.__version__} has no {model_name}")
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(
        getattr(transformers, config_name)(**{**COMMON, **extra})
    ).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim >= 2:
                parameter.normal_(0.0, 0.1)
    model.save_pretrained(tmp_path / "target")
    target = load_target(tmp_path / "target", device="cpu", dtype="fp32")
    draft_config = draft_config_dict(transformers.LlamaConfig(**{**COMMON, **extra}), draft_vocab=128)
    save_draft(tmp_path / "draft", draft_config, random_draft_tensors(draft_config))
    draft, report = load_checked_draft(tmp_path / "draft", target)

    prompt = [3, 17, 40, 2, 9]
    greedy = plain_greedy(target, prompt, 24)  # once: both replays are held to it
    for num_steps in (1, 3):  # 29 tokens: past every sliding window (8), through rejections and rollbacks
        output = output_ids_of(
            list(replay(target, draft, prompt, report.wiring, ReplayConfig(num_steps, 24)))
        )
        assert output == greedy
    with torch.inference_mode(), AuxCapture(target.model, [0, 1, 3, 5]) as capture:
        states = target.model(input_ids=torch.tensor([prompt]), output_hidden_states=True).hidden_states
        for index in (0, 1, 3, 5):
            assert torch.allclose(capture.captured[index][0], states[index][0], atol=1e-5), index
