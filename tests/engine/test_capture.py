"""What the hooks capture: HF hidden_states indices, with index L taken before the final norm."""

from __future__ import annotations

import pytest

from backend import BadInput


def test_capture_matches_hf_hidden_states_and_index_L_is_pre_norm():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from backend.target.capture import AuxCapture

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=50,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=32,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 50, (1, 9))
    with torch.no_grad(), AuxCapture(model, (0, 4, 32)) as capture:
        hf = model(input_ids=ids, output_hidden_states=True).hidden_states
        features = capture.features()
    assert features.shape == (9, 48)
    emb, layer4, last = features.chunk(3, dim=-1)
    assert torch.equal(emb, hf[0][0])  # embedding output
    assert torch.equal(layer4, hf[4][0])  # output of decoder layer 3
    # HF's hidden_states[32] is post-norm; ours is the residual stream before the final norm.
    assert not torch.allclose(last, hf[32][0])
    assert torch.allclose(model.model.norm(last), hf[32][0], atol=1e-6)
    # our hooks are removed afterwards
    ours = {handle.id for handle in capture.handles}
    modules = [model.model.embed_tokens, *model.model.layers]
    assert not any(ours & set(module._forward_hooks) for module in modules)


def test_a_model_without_llama_style_layers_is_bad_input():
    from transformers import GPT2Config, GPT2LMHeadModel

    from backend.target.capture import AuxCapture

    model = GPT2LMHeadModel(GPT2Config(vocab_size=20, n_positions=16, n_embd=8, n_layer=2, n_head=2))
    with pytest.raises(BadInput, match="cannot find its decoder layers"):
        AuxCapture(model, (0, 1, 2))
