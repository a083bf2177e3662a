"""Loaded models are cached by path (never by a wiring override); a draft that fails preflight is
refused with its report; an inconsistent draft config is a BadInput."""

from __future__ import annotations

import pytest

from backend import BadInput


def test_pairs_are_cached_by_path_not_by_override(pairs):
    from backend.service import models

    pair = pairs["copy-L4-bigram"]
    models.forget()
    target, draft, report = models.pair(str(pair.target_dir), str(pair.draft_dir), device="cpu", dtype="fp32")
    assert report.ok and report.wiring == pair.wiring and target.path == str(pair.target_dir)
    again, same, _ = models.pair(str(pair.target_dir), str(pair.draft_dir), device="cpu", dtype="fp32")
    assert again is target and same is draft  # one load whatever wiring the requests feed it
    assert models.target(str(pair.target_dir), "cpu", "fp32") is target
    assert models.draft(target, str(pair.draft_dir))[0] is draft
    models.forget()
    fresh, _, _ = models.pair(str(pair.target_dir), str(pair.draft_dir), device="cpu", dtype="fp32")
    assert fresh is not target


def test_refused_draft_carries_its_preflight_report(pairs, tmp_path):
    from safetensors.torch import load_file

    from backend.engine.preflight import PreflightRefused
    from backend.service import models
    from tests.support.synthetic import save_draft

    pair = pairs["random-L2"]
    tensors = load_file(pair.draft_dir / "model.safetensors")
    broken = save_draft(tmp_path / "broken", pair.config, {k: v for k, v in tensors.items() if k != "d2t"})
    with pytest.raises(PreflightRefused) as refused:
        models.pair(str(pair.target_dir), str(broken))
    assert refused.value.report.result().to_dict()["ok"] is False and "d2t" in str(refused.value)
    inconsistent = save_draft(tmp_path / "inconsistent", {**pair.config, "hidden_size": 999}, tensors)
    with pytest.raises(BadInput, match="inconsistent"):
        models.pair(str(pair.target_dir), str(inconsistent))


def test_a_draft_rewritten_on_disk_is_loaded_again(pairs, tmp_path):
    """The cache key holds the directory's file stamps: a draft whose files changed (here its config,
    now declaring another wiring) is never served from memory; an unchanged one still is."""
    import json
    import os
    import shutil

    from backend.service import models

    pair = pairs["copy-L4-bigram"]
    draft_dir = shutil.copytree(pair.draft_dir, tmp_path / "draft")
    target, draft, report = models.pair(str(pair.target_dir), str(draft_dir), device="cpu", dtype="fp32")
    assert models.pair(str(pair.target_dir), str(draft_dir), device="cpu", dtype="fp32")[1] is draft
    config_path = draft_dir / "config.json"
    config = json.loads(config_path.read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 0, 0]  # SpecForge's nested ids
    config_path.write_text(json.dumps(config))
    os.utime(config_path, ns=(1, 1))  # a different stamp even where the clock's resolution is coarse
    again, reloaded, new_report = models.pair(
        str(pair.target_dir), str(draft_dir), device="cpu", dtype="fp32"
    )
    assert again is target and reloaded is not draft
    assert list(new_report.wiring.aux_hf_indices) != list(report.wiring.aux_hf_indices)
