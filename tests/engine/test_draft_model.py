"""The EAGLE-3 draft module: variant flags change its math, its RoPE stays fp32, its masks."""

from __future__ import annotations

import pytest

from tests.support.checkpoints import failures, target_config


def rand_plus_half(*shape):
    import torch

    return torch.rand(*shape) + 0.5


VARIANTS = {  # flag: (its tensors, a reading that honours it in one forward)
    "fc_norm": (
        lambda t, h: t.update({f"fc_norm.{i}.weight": rand_plus_half(h) for i in range(3)}),
        "specforge",
    ),
    "norm_before_fc": (lambda t, h: t.update({"input_norm.weight": rand_plus_half(3 * h)}), "vllm"),
    "norm_before_residual": (lambda t, h: None, "vllm"),
    "norm_output": (lambda t, h: None, "specforge"),  # SpecForge: false = no norm before lm_head
}


@pytest.mark.parametrize("flag", list(VARIANTS))
def test_variant_flags_are_implemented(tmp_path, target_dirs, flag):
    """Each flag loads with its tensors, changes the draft's output under a reading that honours it,
    and a missing tensor fails."""
    import torch

    from backend.drafts.readings import read_as
    from backend.engine.loading import load_target
    from backend.engine.preflight import load_checked_draft, preflight
    from tests.support.synthetic import draft_config_dict, random_draft_tensors, save_draft

    value = flag != "norm_output"  # norm_output defaults to true; the variant is turning it off
    config = draft_config_dict(target_config(target_dirs[4]), draft_vocab=40, **{flag: value})
    plain_config = draft_config_dict(target_config(target_dirs[4]), draft_vocab=40)
    tensors = random_draft_tensors(config)
    add_tensors, engine = VARIANTS[flag]
    add_tensors(tensors, 32)
    variant_dir = save_draft(tmp_path / "variant", config, tensors)
    plain_dir = save_draft(
        tmp_path / "plain",
        plain_config,
        {n: t for n, t in tensors.items() if not n.startswith(("fc_norm", "input_norm"))},
    )
    report = preflight(variant_dir, target_dirs[4])
    assert report.ok, failures(report)
    target = load_target(target_dirs[4], device="cpu")
    (variant, _), (plain, _) = load_checked_draft(variant_dir, target), load_checked_draft(plain_dir, target)
    features = torch.randn(5, 96) * 3
    tokens, positions = torch.tensor([1, 2, 3, 4, 5]), torch.arange(5)
    math = read_as(engine, variant.config, 4, has_own_embedding=False).math
    plain_math = read_as(engine, plain.config, 4, has_own_embedding=False).math
    with torch.no_grad():
        out_variant = variant.logits(
            variant(variant.fuse(features, math), tokens, positions, math=math)[0], math
        )
        out_plain = plain.logits(
            plain(plain.fuse(features, plain_math), tokens, positions, math=plain_math)[0]
        )
    assert not torch.allclose(out_variant, out_plain)
    if flag in ("fc_norm", "norm_before_fc"):
        without = {
            n: t
            for n, t in random_draft_tensors(config).items()
            if not n.startswith(("fc_norm", "input_norm"))
        }
        missing = save_draft(tmp_path / "missing", config, without)
        assert "missing tensors" in failures(preflight(missing, target_dirs[4]))


def test_rope_frequencies_stay_fp32_when_the_draft_is_cast():
    import torch

    from backend.engine.draft_model import Eagle3Draft
    from tests.engine.test_draft_config import EAGLE_RELEASE, parse

    draft = Eagle3Draft(parse(EAGLE_RELEASE), target_embedding=None).to(torch.bfloat16)
    assert draft.rotary.inv_freq.dtype == torch.float32 and draft.fc.weight.dtype == torch.bfloat16


def test_causal_mask_sees_the_past_and_the_new_tokens_up_to_itself():
    from backend.engine.draft_model import causal_mask

    assert causal_mask(2, 2, "cpu").int().tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]


def test_post_norm_feedback_changes_the_next_draft_step(tmp_path, target_dirs):
    """EAGLE 3.1 (vLLM/speculators norm_output=true): the next step is fed norm(out), not out."""
    import torch

    from backend.drafts.readings import read_as
    from backend.engine.loading import load_target
    from backend.engine.preflight import load_checked_draft
    from tests.support.synthetic import draft_config_dict, random_draft_tensors, save_draft

    config = draft_config_dict(
        target_config(target_dirs[4]), draft_vocab=40, layout="speculators", norm_output=True
    )
    tensors = random_draft_tensors(config)
    tensors["norm.weight"] = rand_plus_half(32)
    draft_dir = save_draft(tmp_path / "d", config, tensors, layout="speculators")
    draft, _ = load_checked_draft(draft_dir, load_target(target_dirs[4], device="cpu"))
    vllm = read_as("vllm", draft.config, 4, has_own_embedding=False).math
    # SpecForge's TTT loop always feeds the pre-norm output back; vLLM reads norm_output as post-norm
    sglang = read_as("specforge", draft.config, 4, has_own_embedding=False).math
    assert vllm.post_norm_feedback and not sglang.post_norm_feedback
    out = torch.randn(1, 32) * 3
    with torch.no_grad():
        assert torch.equal(draft.feedback(out, sglang), out)
        assert torch.allclose(draft.feedback(out, vllm), draft.norm(out))

        def step(math):
            return draft(draft.feedback(out, math), torch.tensor([3]), torch.tensor([5]), math=math)

        assert not torch.allclose(step(vllm), step(sglang))
