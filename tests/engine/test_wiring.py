"""Aux-layer ids -> HF hidden_states indices, under both conventions, and parsing a typed wiring
(backend.run.wiring is plain Python; only the draft-config parser needs transformers). The wiring a
draft declares is its training reading's (backend.drafts.readings.declared_wiring); an override is
built by wiring.override_wiring."""

from __future__ import annotations

import pytest

from backend import BadInput
from backend.run.wiring import (
    check_indices,
    default_hf_indices,
    override_wiring,
    parse_aux_indices,
    to_hf_indices,
)

BASE = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 16,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "vocab_size": 50,
}


def wiring_of(extra: dict, num_layers: int = 32, override=None, convention="hf"):
    from backend.drafts.draft_config import parse_draft_config  # transformers: imported when used
    from backend.drafts.readings import declared_wiring

    if override is not None:
        return override_wiring(override, num_layers, convention)
    return declared_wiring(parse_draft_config({**BASE, **extra}), num_layers)


def test_wiring_table_for_32_layers():
    nested = wiring_of({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}})
    assert nested.aux_hf_indices == (2, 16, 29) and "output of layer" in nested.source
    top_level = wiring_of({"eagle_aux_hidden_state_layer_ids": [2, 16, 29]})
    assert top_level.aux_hf_indices == (2, 16, 29) and "HF indices" in top_level.source
    assert wiring_of({}).aux_hf_indices == (2, 16, 29)
    assert wiring_of({}, override=[0, 4, 32]).aux_hf_indices == (0, 4, 32)
    assert wiring_of({}, override=[3, 31, 59], convention="layer_output", num_layers=61).aux_hf_indices == (
        4,
        32,
        60,
    )


def test_same_list_in_the_other_field_selects_layers_one_apart():
    """vLLM PR #43671: the same ids placed nested for SGLang and top-level for vLLM."""
    nested = wiring_of({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}})
    top = wiring_of({"eagle_aux_hidden_state_layer_ids": [2, 16, 29]})
    assert [a - b for a, b in zip(nested.aux_hf_indices, top.aux_hf_indices, strict=True)] == [1, 1, 1]


def test_nested_wins_over_top_level():
    both = wiring_of(
        {
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]},
            "eagle_aux_hidden_state_layer_ids": [5, 6, 7],
        }
    )
    assert both.aux_hf_indices == (2, 16, 29)


@pytest.mark.parametrize("override", [[0, 4, 33], [-1, 2, 3], [1, 2]])
def test_bad_override_is_refused(override):
    with pytest.raises(BadInput):
        wiring_of({}, override=override)


def test_conventions_and_defaults():
    assert default_hf_indices(32) == [2, 16, 29] and default_hf_indices(8) == [2, 4, 5]
    assert to_hf_indices([1, 15, 28], "layer_output") == [2, 16, 29]
    assert to_hf_indices([2, 16, 29], "hf") == [2, 16, 29]
    with pytest.raises(BadInput, match="unknown wiring convention"):
        to_hf_indices([1, 2, 3], "sglang")
    check_indices((0, 4, 8), 8)
    with pytest.raises(BadInput, match="valid HF indices are 0..8"):
        check_indices((0, 4, 9), 8)
    with pytest.raises(BadInput, match="exactly three"):
        check_indices((0, 4), 8)


def test_parse_aux_indices():
    assert parse_aux_indices("2, 4,5") == (2, 4, 5)
    assert (
        parse_aux_indices("") is None and parse_aux_indices(None) is None and parse_aux_indices("  ") is None
    )
    with pytest.raises(BadInput, match="expected three comma-separated integers"):
        parse_aux_indices("a,b,c")
    # how many and which are checked once, where the target's depth is known (override_wiring)
    assert parse_aux_indices("1,2") == (1, 2) and parse_aux_indices("-1,2,3") == (-1, 2, 3)
    with pytest.raises(BadInput, match="exactly three target states; got 2"):
        override_wiring(parse_aux_indices("1,2"), 6)
    with pytest.raises(BadInput, match=r"aux HF indices \[-1\] out of range: .* valid HF indices are 0..6"):
        override_wiring(parse_aux_indices("-1,2,3"), 6)
