"""Preflight passes on good drafts and fails, with a message a user understands, on each broken one;
a draft that fails is never built."""

from __future__ import annotations

import json

import pytest

from backend import BadInput
from tests.support.checkpoints import failures, statuses, target_config, write_draft


def preflight(draft_dir, target_dir, **kwargs):
    from backend.engine.preflight import preflight as run

    return run(draft_dir, target_dir, **kwargs)


def test_missing_d2t_with_smaller_draft_vocab_fails(tmp_path, target_dirs):
    from backend.engine.loading import load_target
    from backend.engine.preflight import PreflightRefused, load_checked_draft

    draft_dir = write_draft(
        tmp_path / "d", target_dirs[4], edit_tensors=lambda t: (t.pop("d2t"), t.pop("t2d"))
    )
    report = preflight(draft_dir, target_dirs[4])
    assert not report.ok
    assert "draft vocab 40 < target vocab 80 but the checkpoint has no d2t" in failures(report)
    with pytest.raises(BadInput, match="no d2t") as refused:
        load_checked_draft(draft_dir, load_target(target_dirs[4], device="cpu"))
    assert isinstance(refused.value, PreflightRefused)
    assert (
        "failed preflight: d2t" in str(refused.value)
        and refused.value.report.result().to_dict()["ok"] is False
    )


def test_fc_width_mismatch_fails(tmp_path, target_dirs):
    def narrow(tensors):
        tensors["fc.weight"] = tensors["fc.weight"][:, :64].contiguous()

    report = preflight(write_draft(tmp_path / "d", target_dirs[4], edit_tensors=narrow), target_dirs[4])
    assert "fc.weight input width 64 != 3 x target hidden size 32 (= 96)" in failures(report)


def test_draft_for_another_target_fails(tmp_path, target_dirs):
    from tests.support.synthetic import (
        TargetShape,
        draft_config_dict,
        make_target,
        random_draft_tensors,
        save_draft,
    )

    other = make_target(tmp_path / "wide", TargetShape(num_layers=4, hidden=48, vocab=80))
    draft_dir = save_draft(
        tmp_path / "d", draft_config_dict(other.config), random_draft_tensors(draft_config_dict(other.config))
    )
    assert "fc width" in failures(preflight(draft_dir, target_dirs[4]))


def test_unknown_keys_warn_and_needed_math_is_refused_first(tmp_path, target_dirs):
    draft_dir = write_draft(
        tmp_path / "d", target_dirs[4], edit_config=lambda c: c.update({"norm_after_fc": True})
    )
    report = preflight(draft_dir, target_dirs[4])
    assert report.ok and any("norm_after_fc" in c.message for c in report.warnings())
    refused = write_draft(
        tmp_path / "mla", target_dirs[4], edit_config=lambda c: c.update({"kv_lora_rank": 16, "bogus": True})
    )
    report = preflight(refused, target_dirs[4])
    assert report.failures()[0].message.startswith(
        "needs math SpecLens does not have: MLA attention (kv_lora_rank)"
    )


def test_eagle1_style_draft_is_refused(tmp_path, target_dirs):
    draft_dir = write_draft(
        tmp_path / "d",
        target_dirs[4],
        edit_config=lambda c: c.update({"eagle_config": {"use_aux_hidden_state": False}}),
    )
    assert "use_aux_hidden_state is false" in failures(preflight(draft_dir, target_dirs[4]))


def test_unexpected_and_missing_tensors_fail_with_the_files_names(tmp_path, target_dirs):
    import torch

    def tamper(tensors):
        tensors["layers.0.self_attn.extra_gate.weight"] = torch.zeros(4, 4)
        del tensors["layers.0.mlp.up_proj.weight"]

    report = preflight(write_draft(tmp_path / "d", target_dirs[4], edit_tensors=tamper), target_dirs[4])
    message = failures(report)
    assert "missing tensors (would stay random): midlayer.mlp.up_proj.weight" in message
    assert "unexpected tensors (would be skipped silently): midlayer.self_attn.extra_gate.weight" in message


def test_shape_mismatch_with_config_fails(tmp_path, target_dirs):
    def shrink(tensors):
        tensors["layers.0.mlp.up_proj.weight"] = tensors["layers.0.mlp.up_proj.weight"][:10].contiguous()

    message = failures(
        preflight(write_draft(tmp_path / "d", target_dirs[4], edit_tensors=shrink), target_dirs[4])
    )
    assert "midlayer.mlp.up_proj.weight [10, 32] vs config [64, 32]" in message


def test_corrupt_vocab_mappings_fail(tmp_path, target_dirs):
    def out_of_range(tensors):
        tensors["d2t"] = tensors["d2t"] + 500

    def t2d_disagrees(tensors):
        t2d = tensors["t2d"].clone()
        first_in, first_out = int(t2d.nonzero()[0]), int((~t2d).nonzero()[0])
        t2d[first_in], t2d[first_out] = False, True
        tensors["t2d"] = t2d

    cases = {"outside the target vocab": out_of_range, "t2d disagrees with d2t": t2d_disagrees}
    for expected, edit in cases.items():
        draft_dir = write_draft(tmp_path / expected.replace(" ", "_"), target_dirs[4], edit_tensors=edit)
        assert expected in failures(preflight(draft_dir, target_dirs[4]))


def test_context_warning_and_no_files(tmp_path, target_dirs):
    from tests.support.synthetic import draft_config_dict

    draft_dir = write_draft(tmp_path / "d", target_dirs[4])
    report = preflight(draft_dir, target_dirs[4], sample_length=5000)
    assert report.ok and any(
        "longer than the draft's max_position_embeddings (2048)" in w for w in statuses(report)["warn"]
    )
    assert "context" in [c.name for c in report.warnings()]
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text(
        json.dumps(draft_config_dict(target_config(target_dirs[4])))
    )
    assert "no model.safetensors, pytorch_model.bin or their sharded index" in failures(
        preflight(tmp_path / "empty", target_dirs[4])
    )


def test_context_check_is_its_own_check(tmp_path, target_dirs):
    from backend.engine.loading import read_draft, read_target_config
    from backend.engine.preflight import check_draft, context_check

    files = read_draft(write_draft(tmp_path / "d", target_dirs[4]))
    assert context_check(files.config, 2048).status == "pass"
    warning = context_check(files.config, 2049)
    assert warning.status == "warn" and "(2049 tokens)" in warning.message
    assert "context" not in {c.name for c in check_draft(files, read_target_config(target_dirs[4])).checks}


def test_a_wiring_override_is_checked_against_the_target(tmp_path, target_dirs):
    from backend.engine.loading import load_target
    from backend.engine.preflight import PreflightRefused, load_checked_draft

    draft_dir = write_draft(tmp_path / "d", target_dirs[4])
    assert preflight(draft_dir, target_dirs[4], aux_hf_indices=(0, 2, 4)).result().to_dict()[
        "aux_hf_indices"
    ] == [
        0,
        2,
        4,
    ]
    report = preflight(draft_dir, target_dirs[4], aux_hf_indices=(0, 2, 5))
    assert (
        "aux HF indices [5] out of range" in failures(report)
        and report.result().to_dict()["aux_hf_indices"] == []
    )
    with pytest.raises(PreflightRefused, match="out of range"):
        load_checked_draft(draft_dir, load_target(target_dirs[4], device="cpu"), (0, 2, 5))


def test_missing_target_or_draft_directory_is_bad_input(tmp_path, target_dirs):
    with pytest.raises(BadInput, match="not a local Hugging Face model directory"):
        preflight(tmp_path, tmp_path / "nope")
    report = preflight(tmp_path / "nope", target_dirs[4])
    assert "no such directory" in failures(report)


@pytest.mark.parametrize(
    "edit, reason",
    [
        (lambda c: c.update(hidden_act="nope"), "hidden_act 'nope' is not an activation"),
        (lambda c: c.update(eagle_config=[1, 2]), "eagle_config must be a JSON object"),
        (lambda c: c.update(rope_theta="bad"), "rope_theta must be a positive number, got 'bad'"),
        (lambda c: c.update(rope_theta=-1.0), "rope_theta must be a positive number, got -1.0"),
        (
            lambda c: c.update(rope_scaling={"rope_type": "yarn", "factor": "x"}),
            "its RoPE settings cannot be used",
        ),
        (lambda c: c.update(architectures=7), "architectures must be a list of class names"),
        (
            lambda c: c.update(rope_scaling={"rope_type": "nonsense", "factor": 2.0}),
            "unknown rope type 'nonsense'",
        ),
    ],
)
def test_config_values_transformers_only_rejects_when_building_fail_naming_the_file(
    tmp_path, target_dirs, edit, reason
):
    """transformers takes any string for these and fails (KeyError, TypeError) only when the layer
    is built: preflight fails first, naming the config file by its path."""
    from backend.engine.loading import load_target
    from backend.engine.preflight import load_checked_draft

    draft_dir = write_draft(tmp_path / "d", target_dirs[4])
    config = json.loads((draft_dir / "config.json").read_text())
    edit(config)  # on disk only: the draft's tensors are those of a good config
    (draft_dir / "config.json").write_text(json.dumps(config))
    report = preflight(draft_dir, target_dirs[4])
    assert not report.ok
    assert reason in failures(report) and str(draft_dir / "config.json") in failures(report)
    with pytest.raises(BadInput, match="config.json"):
        load_checked_draft(draft_dir, load_target(target_dirs[4], device="cpu"))


def test_sizes_no_tensor_can_have_fail_without_allocating(tmp_path, target_dirs):
    draft_dir = write_draft(tmp_path / "d", target_dirs[4])
    config = json.loads((draft_dir / "config.json").read_text())
    config.update(hidden_size=10**12, intermediate_size=3 * 10**12)
    (draft_dir / "config.json").write_text(json.dumps(config))
    report = preflight(draft_dir, target_dirs[4])
    assert not report.ok and "target_hidden_size 1000000000000 != target hidden_size 32" in failures(report)
    assert "describe no buildable draft" in failures(report)


def test_a_wrong_number_of_aux_ids_fails_the_wiring_check(tmp_path, target_dirs):
    def two_ids(config):
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [0, 1], "use_aux_hidden_state": True}

    draft_dir = write_draft(tmp_path / "d", target_dirs[4])
    config = json.loads((draft_dir / "config.json").read_text())
    two_ids(config)
    (draft_dir / "config.json").write_text(json.dumps(config))
    report = preflight(draft_dir, target_dirs[4])
    assert not report.ok and "EAGLE-3 fuses exactly three target states; got 2 indices" in failures(report)


def test_integer_or_non_finite_weights_fail(tmp_path, target_dirs):
    import torch

    def quantized(tensors):
        tensors["fc.weight"] = tensors["fc.weight"].to(torch.int8)

    def poisoned(tensors):
        tensors["norm.weight"] = tensors["norm.weight"] * float("nan")

    report = preflight(write_draft(tmp_path / "q", target_dirs[4], edit_tensors=quantized), target_dirs[4])
    assert "weights that are not floating point" in failures(report) and "fc.weight (int8)" in failures(
        report
    )
    report = preflight(write_draft(tmp_path / "n", target_dirs[4], edit_tensors=poisoned), target_dirs[4])
    assert "NaN or infinite values in norm.weight" in failures(report)
    assert preflight(write_draft(tmp_path / "ok", target_dirs[4]), target_dirs[4]).ok  # d2t/t2d are integers


def test_eagle_placeholder_maps_of_a_full_vocabulary_draft_load_as_the_identity(tmp_path, target_dirs):
    """EAGLE's inference class saves a full-vocabulary draft with an all-zero d2t and an all-False t2d
    (ea_model.py drops both when the vocabularies are equal): every engine runs it as the identity."""
    import torch

    from backend.engine.loading import load_target
    from backend.engine.preflight import load_checked_draft
    from tests.support.synthetic import draft_config_dict

    vocab = draft_config_dict(target_config(target_dirs[4]))["vocab_size"]

    def placeholders(tensors):
        tensors["d2t"] = torch.zeros(vocab, dtype=torch.long)
        tensors["t2d"] = torch.zeros(vocab, dtype=torch.bool)

    draft_dir = write_draft(tmp_path / "d", target_dirs[4], draft_vocab=vocab, edit_tensors=placeholders)
    report = preflight(draft_dir, target_dirs[4])
    assert report.ok and any("EAGLE's own placeholder maps" in m for m in statuses(report)["pass"])
    draft, _ = load_checked_draft(draft_dir, load_target(target_dirs[4], device="cpu"))
    ids = torch.arange(vocab)
    assert torch.equal(draft.to_target_ids(ids), ids)
