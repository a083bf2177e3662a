"""Aux-layer ids -> HF hidden_states indices, under both conventions, and what the hooks capture."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from backend import BadInput
from backend.draft_config import parse_draft_config
from backend.wiring import AuxCapture, resolve_wiring

BASE = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 16, "num_attention_heads": 2,
        "intermediate_size": 32, "vocab_size": 50}


def wiring_of(extra: dict, num_layers: int = 32, override=None, convention="hf"):
    return resolve_wiring(parse_draft_config({**BASE, **extra}), num_layers, override, convention)


def test_wiring_table_for_32_layers():
    nested = wiring_of({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}})
    assert nested.aux_hf_indices == (2, 16, 29) and "output-of-layer" in nested.source
    top_level = wiring_of({"eagle_aux_hidden_state_layer_ids": [2, 16, 29]})
    assert top_level.aux_hf_indices == (2, 16, 29) and "HF indices" in top_level.source
    assert wiring_of({}).aux_hf_indices == (2, 16, 29)
    assert wiring_of({}, override=[0, 4, 32]).aux_hf_indices == (0, 4, 32)
    assert wiring_of({}, override=[3, 31, 59], convention="layer_output", num_layers=61).aux_hf_indices == (4, 32, 60)


def test_same_list_in_the_other_field_selects_layers_one_apart():
    """vLLM PR #43671: the same ids placed nested for SGLang and top-level for vLLM."""
    nested = wiring_of({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}})
    top = wiring_of({"eagle_aux_hidden_state_layer_ids": [2, 16, 29]})
    assert [a - b for a, b in zip(nested.aux_hf_indices, top.aux_hf_indices, strict=True)] == [1, 1, 1]


def test_nested_wins_over_top_level():
    both = wiring_of({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]},
                      "eagle_aux_hidden_state_layer_ids": [5, 6, 7]})
    assert both.aux_hf_indices == (2, 16, 29)


@pytest.mark.parametrize("override", [[0, 4, 33], [-1, 2, 3], [1, 2]])
def test_bad_override_is_refused(override):
    with pytest.raises(BadInput):
        wiring_of({}, override=override)


def test_capture_matches_hf_hidden_states_and_index_L_is_pre_norm():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=32,
                         num_attention_heads=2, num_key_value_heads=1)
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 50, (1, 9))
    wiring = wiring_of({}, override=[0, 4, 32])
    with torch.no_grad(), AuxCapture(model, wiring.aux_hf_indices) as capture:
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
