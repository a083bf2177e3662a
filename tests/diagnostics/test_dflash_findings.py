"""Planted DFlash variants each give one finding naming the field (or flag) and the value to write:
block length vs K, the last layer, the mask id, a missing rope_theta (preflight and the three lints)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    from tests.support.synthetic import (
        TargetShape,
        dflash_config_dict,
        make_target,
        random_dflash_tensors,
        save_dflash,
    )

    root = tmp_path_factory.mktemp("planted")
    model = make_target(root / "target", TargetShape(num_layers=4, hidden=64, vocab=128), seed=3)
    config = dflash_config_dict(model.config, block_size=5, target_layer_ids=[0, 1, 2])
    variants = {
        "good": config,
        "last": config | {"dflash_config": {**config["dflash_config"], "target_layer_ids": [1, 2, 3]}},
        "mask": config | {"dflash_config": {**config["dflash_config"], "mask_token_id": 128}},
        "rope": {k: v for k, v in config.items() if k != "rope_theta"},
    }
    for name, variant in variants.items():
        save_dflash(root / name, variant, random_dflash_tensors(config))
    return root


def codes(result) -> set[str]:
    return {f.code for f in result.findings}


def test_preflight_names_each_planted_field(planted):
    from backend.engine.preflight import preflight

    def failing(name):
        report = preflight(planted / name, planted / "target")
        return {c.name: c for c in report.checks if c.status != "pass"}

    assert failing("good") == {}
    assert (
        "target layers" in failing("last")
        and "layer 3 is the target's last" in failing("last")["target layers"].message
    )
    mask = failing("mask")["mask token"]
    assert mask.status == "fail" and "write an id below 128" in mask.message
    assert "rope_theta is absent" in failing("rope")["rope_theta"].message


def test_the_lints_say_block_length_and_the_engine_specific_traps(planted):
    from backend.diagnostics.lint import lint_command
    from backend.diagnostics.lint_llamacpp import lint_llamacpp

    target = str(planted / "target")
    good = planted / "good"
    vllm = f'--model {target} --speculative-config \'{{"method": "dflash", "model": "{good}", "num_speculative_tokens": 4}}\''
    assert codes(lint_command(good, vllm=vllm, target_dir=target).result()) == set()
    longer = vllm.replace('"num_speculative_tokens": 4', '"num_speculative_tokens": 15')
    (block,) = lint_command(good, vllm=longer, target_dir=target).result().findings
    assert block.code == "dflash-block-length" and '"num_speculative_tokens": 4' in block.fix
    wrong = vllm.replace('"dflash"', '"eagle3"')
    assert codes(lint_command(good, vllm=wrong, target_dir=target).result()) == {"dflash-method"}
    server = "llama-server -m t.gguf -md d.gguf --spec-type draft-dflash --spec-draft-n-max 4"
    assert codes(lint_llamacpp(server, str(good), target)) == {"dflash-kv-f16"}
    last = lint_llamacpp(server, str(planted / "last"), target)
    assert [f.severity for f in last.findings if f.code == "dflash-last-layer"] == ["error"]
    rope = lint_command(
        planted / "rope", vllm=vllm.replace(str(good), str(planted / "rope")), target_dir=target
    )
    assert codes(rope.result()) == {"dflash-rope-theta"}


def test_diagnose_on_a_dflash_draft_says_the_traps_in_its_classes(planted):
    """Diagnose reads a DFlash draft (no flag): preflight's last-layer finding and the vLLM command's block
    length, in diagnose's classes; without samples the layer probe is said not run."""
    from backend.diagnostics.diagnose import DiagnoseOptions
    from backend.service.diagnosis import diagnose

    target = str(planted / "target")
    command = f'--model {target} --speculative-config \'{{"method": "dflash", "model": "{planted / "last"}", "num_speculative_tokens": 9}}\''
    result = diagnose(target, str(planted / "last"), None, DiagnoseOptions(vllm=command))
    classes = {(f.cls, f.severity) for f in result.findings}
    assert ("aux-wiring", "warn") in classes and ("serving-flags", "warn") in classes, classes
    assert result.verdict == "suspect" and result.checks["wiring probe"].startswith("skipped")
    assert any("dflash-block-length" in f.message for f in result.findings)
