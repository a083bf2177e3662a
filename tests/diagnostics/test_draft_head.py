"""Class draft-head (issue 42): a head missing, non-finite, at its random initialisation, or the
target's own rows. Planted on copies of the bundled demo's trained `final` draft, one change each."""

from __future__ import annotations

import shutil

import pytest


def _copy(tmp_path, name, edit_tensors):
    import torch
    from safetensors.torch import load_file, save_file

    from backend.defaults import DEMO_DRAFTS

    directory = tmp_path / name
    shutil.copytree(DEMO_DRAFTS / "final", directory)
    path = directory / "model.safetensors"
    tensors = load_file(str(path))
    edit_tensors(tensors, torch)
    save_file(tensors, str(path))
    return str(directory)


def _diagnose(draft):
    from backend.defaults import DEMO_TARGET
    from backend.service import models
    from backend.service.diagnosis import diagnose

    try:
        return diagnose(str(DEMO_TARGET), draft).to_dict()
    finally:
        models.forget()


def _head(result, severity=None):
    return [
        f
        for f in result["findings"]
        if f["class"] == "draft-head" and (severity is None or f["severity"] == severity)
    ]


def test_the_trained_head_gets_no_draft_head_finding(tmp_path):
    result = _diagnose(_copy(tmp_path, "copy", lambda t, torch: None))
    assert _head(result) == [] and "draft head" in result["checks"]


@pytest.mark.parametrize(
    "init",
    [
        lambda shape, torch, g: torch.randn(shape, generator=g) * 0.02,  # normal(0, initializer_range)
        lambda shape, torch, g: (torch.rand(shape, generator=g) * 2 - 1) / shape[1] ** 0.5,  # nn.Linear
    ],
    ids=["normal", "kaiming-uniform"],
)
def test_a_head_at_random_init_statistics_is_broken(tmp_path, init):
    def reinit(tensors, torch):
        head = tensors["lm_head.weight"]
        tensors["lm_head.weight"] = init(head.shape, torch, torch.Generator().manual_seed(3)).to(head.dtype)

    result = _diagnose(_copy(tmp_path, "random", reinit))
    (finding,) = _head(result, "fail")
    assert result["verdict"] == "broken" and "untrained initialisation" in finding["message"]
    evidence = finding["evidence"]
    assert evidence["row_norm_spread"] <= 1.5 * evidence["iid_row_norm_spread"]
    assert "lm_head.weight" in finding["fix"]


def test_a_missing_head_is_draft_head_not_a_variant_flag(tmp_path):
    result = _diagnose(_copy(tmp_path, "headless", lambda t, torch: t.pop("lm_head.weight")))
    (finding,) = _head(result, "fail")
    assert result["verdict"] == "broken" and result["headline"].startswith("draft-head: preflight tensors")
    assert "sglang#27908" in finding["fix"] and "_maybe_share_lm_head" in finding["fix"]


def test_a_non_finite_head_is_draft_head(tmp_path):
    def poison(tensors, torch):
        tensors["lm_head.weight"][0, 0] = float("nan")

    (finding,) = _head(_diagnose(_copy(tmp_path, "nan", poison)), "fail")
    assert "NaN" in finding["message"] and "corrupt" in finding["fix"]


def test_a_head_copied_from_the_target_is_said(tmp_path):
    from backend.defaults import DEMO_TARGET

    def copy_target_rows(tensors, torch):
        from safetensors.torch import load_file

        weights = load_file(str(next(DEMO_TARGET.glob("*.safetensors"))))
        head = weights.get("lm_head.weight", weights.get("model.embed_tokens.weight"))
        ids = torch.arange(len(tensors["d2t"])) + tensors["d2t"]
        tensors["lm_head.weight"] = head[ids].to(tensors["lm_head.weight"].dtype).contiguous()

    (finding,) = _head(_diagnose(_copy(tmp_path, "target-head", copy_target_rows)), "info")
    assert finding["evidence"]["mean_row_cosine_with_target"] > 0.9999 and "copied" in finding["message"]


@pytest.mark.slow
def test_diagnose_json_names_the_random_head(tmp_path):
    from backend.defaults import DEMO_TARGET
    from tests.support.cli import cli_json

    def reinit(tensors, torch):
        head = tensors["lm_head.weight"]
        tensors["lm_head.weight"] = (
            torch.randn(head.shape, generator=torch.Generator().manual_seed(1)) * 0.02
        ).to(head.dtype)

    draft = _copy(tmp_path, "random", reinit)
    result = cli_json("diagnose", "--target", str(DEMO_TARGET), "--draft", draft)
    assert result["verdict"] == "broken" and result["headline"].startswith("draft-head:")
