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


def test_preflight_writes_the_missing_rope_theta_and_nothing_for_a_draft_without_a_config_fix(
    planted, tmp_path
):
    """`preflight --write-fix` on a DFlash draft writes the fields whose value is known (rope_theta: the
    target's); a copy it wrote passes, and a draft with nothing to write gets no copy."""
    import json

    from tests.support.cli import cli_json

    pair = ("--target", str(planted / "target"))
    fixed = tmp_path / "fixed"
    report = cli_json(
        "preflight", *pair, "--draft", str(planted / "rope"), "--engine", "vllm", "--write-fix", str(fixed)
    )
    written = json.loads((planted / "target" / "config.json").read_text())
    theta = written.get("rope_theta") or written["rope_parameters"]["rope_theta"]  # transformers 4 / 5
    assert report["fixed_draft"]["config_update"] == {"rope_theta": theta}
    assert json.loads((fixed / "config.json").read_text())["rope_theta"] == theta
    again = cli_json(
        "preflight", *pair, "--draft", str(fixed), "--engine", "llamacpp", "--write-fix", str(tmp_path / "f2")
    )
    assert again["fixed_draft"]["path"] is None and "no config field to fix" in again["fixed_draft"]["said"]
    assert all(c["name"] != "rope_theta" for c in again["checks"]) and not (tmp_path / "f2").exists()


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


def test_the_layer_probe_says_the_declared_layers_are_trained_only_when_apart_from_the_runner_up():
    """dflash_probe.judged: the declared layers scoring lowest are said to be the trained ones only when
    the runner-up is told apart (3 paired standard errors, 8 samples, a 2% gap); else it says the samples
    cannot tell (dflash-shifted on SmolLM2: declared 6.307 nats, the lowest, by a hair)."""
    from backend.diagnostics.dflash_probe import LayerCandidate, judged

    def candidate(ids, label, losses):
        return LayerCandidate(ids, label, sum(losses) / len(losses), 0.3, losses)

    base = [6.0 + 0.1 * (i % 3) for i in range(8)]
    declared = candidate([2, 9], "declared", base)
    close = candidate([1, 8], "declared -1", [x + 0.01 * (1 + i % 2) for i, x in enumerate(base)])
    far = candidate([1, 8], "declared -1", [x + 0.4 + 0.01 * (i % 2) for i, x in enumerate(base)])
    tied = judged(declared, [declared, close], 8, 32, 30)
    assert tied.confirmed and not tied.separated and tied.fix is None
    assert "not told apart from [1, 8]" in tied.verdict and "are the trained ones" not in tied.verdict
    apart = judged(declared, [declared, far], 8, 32, 30)
    assert apart.confirmed and apart.separated and "are the trained ones" in apart.verdict
    assert "apart from the runner-up [1, 8]" in apart.verdict
    few = judged(declared, [declared, far], 4, 32, 30)  # 4 samples separate nothing
    assert not few.separated


def test_the_doctor_on_a_dflash_draft_is_its_preflight(planted):
    """The checkpoint doctor takes a DFlash draft: preflight's checks (the missing rope_theta named), no
    vocabulary coverage or d2t comparison (the draft proposes from the target's own head)."""
    from backend.diagnostics.doctor import doctor

    result = doctor(str(planted / "rope"), str(planted / "target"), samples=[], other_draft=None)
    assert {c.name: c.status for c in result.preflight.checks}["rope_theta"] == "warn"
    assert result.coverage is None and result.mapping_comparison is None


def test_the_engine_table_reads_a_dflash_draft_as_dflash(planted):
    """read_engine_table (the dashboard's engine table, Decode's readings, the default hidden-state
    reference) reads a DFlash draft's target layers, not EAGLE-3's default wiring: Decode opened a
    DFlash run on "what sglang feeds: HF [2, 15, 27]" and failed to compare 5 layers with 3."""
    from backend.drafts.engine_table import read_engine_table
    from backend.service.reference_spec import default_reference

    readings = read_engine_table(planted / "good", planted / "target")
    assert {name: r.aux_hf_indices for name, r in readings.engines.items()} == dict.fromkeys(
        readings.engines, [1, 2, 3]
    )
    assert readings.aux_hf_indices == [1, 2, 3] and not readings.disagreements
    assert (
        default_reference(str(planted / "target"), str(planted / "good"), [1, 2, 3]).kind == "target_hidden"
    )


def test_train_vs_serve_names_the_layers_a_dflash_drafts_features_hold(planted, tmp_path):
    """A DFlash draft's training features (the SpecForge dict, one chunk per target layer) stored from
    the layers one past the declared ones: diagnose --features names the ids to write; a file with
    another number of chunks is refused in one line naming it."""
    import torch

    from backend.engine.loading import load_target
    from backend.engine.teacher import target_pass
    from tests.support.cli import cli_json, run_cli

    target = load_target(str(planted / "target"))
    ids = list(range(3, 40))
    passed = target_pass(target, ids, [1] * len(ids), [2, 3, 4])
    path = tmp_path / "dflash_0.ckpt"
    aux = passed.features([2, 3, 4])[None]
    torch.save(
        {"input_ids": torch.tensor(ids), "loss_mask": torch.ones(len(ids)), "aux_hidden_state": aux}, path
    )
    pair = ("--target", str(planted / "target"), "--draft", str(planted / "good"))
    result = cli_json("diagnose", *pair, "--features", str(path))
    wiring = [f for f in result["findings"] if f["class"] == "aux-wiring"]
    assert len(wiring) == 1 and wiring[0]["severity"] == "fail", result["findings"]
    assert (
        "trained on HF [2, 3, 4]" in wiring[0]["message"]
        and "serving feeds HF [1, 2, 3]" in wiring[0]["message"]
    )
    assert "dflash_config.target_layer_ids = [1, 2, 3]" in wiring[0]["fix"]
    assert result["checks"]["train vs serve"].startswith("ran on")
    # the Train vs serve tab's result carries the same fix (tasks.train_vs_serve_job)
    from backend.data.features import load_feature_file
    from backend.diagnostics.hidden_diff import train_vs_serve

    tab = train_vs_serve(target, load_feature_file(path, 64), [1, 2, 3], dflash=True)
    assert tab.training_aux_hf_indices == [2, 3, 4] and "target_layer_ids = [1, 2, 3]" in tab.fix
    two = tmp_path / "two.ckpt"
    torch.save({"input_ids": torch.tensor(ids), "aux_hidden_state": aux[..., :128]}, two)
    refused = run_cli("diagnose", *pair, "--features", str(two))
    assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0
    assert f"{two}: holds 2 layer chunks, the draft is fed 3" in refused.stderr
