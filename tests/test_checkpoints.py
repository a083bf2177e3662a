"""Every published draft layout loads; preflight passes on good drafts and fails, with a message a
user understands, on each broken one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from backend import BadInput
from backend.checkpoints import load_draft, load_target, preflight
from backend.draft_config import parse_draft_config
from backend.replay import ReplayConfig, output_ids_of, replay
from backend.synthetic import draft_config_dict, make_target, random_draft_tensors, save_draft
from backend.wiring import resolve_wiring
from tests.oracle import plain_greedy


@pytest.fixture(scope="module")
def target_dirs(tmp_path_factory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("targets")
    return {layers: (make_target(root / f"L{layers}", num_layers=layers, hidden=32, vocab=80, seed=layers),
                     root / f"L{layers}")[1] for layers in (4, 7)}


def target_config(target_dir: Path):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(target_dir, local_files_only=True)


def write_draft(path: Path, target_dir: Path, layout="specforge", draft_vocab=40, edit_config=None,
                edit_tensors=None, dtype=None) -> Path:
    config = draft_config_dict(target_config(target_dir), draft_vocab=draft_vocab, layout=layout)
    if edit_config:
        edit_config(config)
    tensors = random_draft_tensors(config)
    if edit_tensors:
        edit_tensors(tensors)
    return save_draft(path, config, tensors, layout, dtype=dtype)


def statuses(report) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for check in report.checks:
        found.setdefault(check.status, []).append(f"{check.name}: {check.message}")
    return found


def failures(report) -> str:
    return " | ".join(statuses(report).get("fail", []))


@pytest.mark.parametrize("layout", ["specforge", "eagle", "speculators"])
@pytest.mark.parametrize("draft_vocab", [40, None])
@pytest.mark.parametrize("layers", [4, 7])
def test_every_layout_loads_passes_preflight_and_replays(tmp_path, target_dirs, layout, draft_vocab, layers):
    target_dir = target_dirs[layers]
    draft_dir = write_draft(tmp_path / "draft", target_dir, layout, draft_vocab, dtype=torch.bfloat16)
    report = preflight(draft_dir, target_dir)
    assert report.ok, failures(report)
    assert report.to_dict()["aux_hf_indices"] == [2, layers // 2, layers - 3]
    assert "bfloat16" in " ".join(statuses(report)["pass"])
    target = load_target(target_dir, device="cpu", dtype="fp32")
    draft = load_draft(draft_dir, target)
    assert draft.has_vocab_mapping == (draft_vocab is not None)
    saved = load_file(str(draft_dir / "model.safetensors")) if layout != "eagle" else torch.load(
        draft_dir / "pytorch_model.bin", weights_only=True)
    fc_name = "fc.weight"
    assert torch.equal(draft.fc.weight, saved[fc_name].float())
    wiring = resolve_wiring(draft.config, target.num_layers)
    output = output_ids_of(list(replay(target, draft, [1, 2, 3], wiring, ReplayConfig(3, 12))))
    assert output == plain_greedy(target, [1, 2, 3], 12)


def test_missing_d2t_with_smaller_draft_vocab_fails(tmp_path, target_dirs):
    draft_dir = write_draft(tmp_path / "d", target_dirs[4], edit_tensors=lambda t: (t.pop("d2t"), t.pop("t2d")))
    report = preflight(draft_dir, target_dirs[4])
    assert not report.ok
    assert "draft vocab 40 < target vocab 80 but the checkpoint has no d2t" in failures(report)
    with pytest.raises(BadInput, match="no d2t"):
        load_draft(draft_dir, load_target(target_dirs[4], device="cpu"))


def test_fc_width_mismatch_fails(tmp_path, target_dirs):
    def narrow(tensors):
        tensors["fc.weight"] = tensors["fc.weight"][:, :64].contiguous()

    report = preflight(write_draft(tmp_path / "d", target_dirs[4], edit_tensors=narrow), target_dirs[4])
    assert "fc.weight input width 64 != 3 x target hidden size 32 (= 96)" in failures(report)


def test_draft_for_another_target_fails(tmp_path, target_dirs, tmp_path_factory):
    other = make_target(tmp_path / "wide", num_layers=4, hidden=48, vocab=80)
    draft_dir = save_draft(tmp_path / "d", draft_config_dict(other.config), random_draft_tensors(
        draft_config_dict(other.config)))
    assert "fc width" in failures(preflight(draft_dir, target_dirs[4]))


def test_unknown_variant_flag_fails(tmp_path, target_dirs):
    draft_dir = write_draft(tmp_path / "d", target_dirs[4],
                            edit_config=lambda c: c.update({"norm_after_fc": True}))
    assert "unknown variant flag norm_after_fc=True" in failures(preflight(draft_dir, target_dirs[4]))


def test_eagle1_style_draft_is_refused(tmp_path, target_dirs):
    draft_dir = write_draft(tmp_path / "d", target_dirs[4], edit_config=lambda c: c.update(
        {"eagle_config": {"use_aux_hidden_state": False}}))
    assert "use_aux_hidden_state is false" in failures(preflight(draft_dir, target_dirs[4]))


def test_unexpected_and_missing_tensors_fail_with_the_files_names(tmp_path, target_dirs):
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

    message = failures(preflight(write_draft(tmp_path / "d", target_dirs[4], edit_tensors=shrink), target_dirs[4]))
    assert "midlayer.mlp.up_proj.weight [10, 32] vs config [64, 32]" in message


class NotATensor:
    def __init__(self):
        self.payload = "arbitrary object"


def test_pickle_that_is_not_weights_only_is_refused(tmp_path, target_dirs):
    draft_dir = write_draft(tmp_path / "d", target_dirs[4], layout="eagle")
    state = torch.load(draft_dir / "pytorch_model.bin", weights_only=True)
    state["training_state"] = NotATensor()
    torch.save(state, draft_dir / "pytorch_model.bin")
    message = failures(preflight(draft_dir, target_dirs[4]))
    assert "pytorch_model.bin holds Python objects beyond tensors; refusing to unpickle it" in message


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
    draft_dir = write_draft(tmp_path / "d", target_dirs[4])
    report = preflight(draft_dir, target_dirs[4], sample_length=5000)
    assert report.ok and any("longer than the draft's max_position_embeddings (2048)" in w
                             for w in statuses(report)["warn"])
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text(json.dumps(draft_config_dict(target_config(target_dirs[4]))))
    assert "no model.safetensors or pytorch_model.bin" in failures(preflight(tmp_path / "empty", target_dirs[4]))


VARIANTS = {
    "fc_norm": lambda t, h: t.update({f"fc_norm.{i}.weight": torch.rand(h) + 0.5 for i in range(3)}),
    "norm_before_fc": lambda t, h: t.update({"input_norm.weight": torch.rand(3 * h) + 0.5}),
    "norm_before_residual": lambda t, h: None,
    "norm_output": lambda t, h: None,
}


@pytest.mark.parametrize("flag", list(VARIANTS))
def test_variant_flags_are_implemented(tmp_path, target_dirs, flag):
    """Each flag loads with its tensors, changes the draft's output, and a missing tensor fails."""
    value = flag != "norm_output"  # norm_output defaults to true; the variant is turning it off
    config = draft_config_dict(target_config(target_dirs[4]), draft_vocab=40, **{flag: value})
    plain_config = draft_config_dict(target_config(target_dirs[4]), draft_vocab=40)
    tensors = random_draft_tensors(config)
    VARIANTS[flag](tensors, 32)
    variant_dir = save_draft(tmp_path / "variant", config, tensors)
    plain_dir = save_draft(tmp_path / "plain", plain_config,
                           {n: t for n, t in tensors.items() if not n.startswith(("fc_norm", "input_norm"))})
    report = preflight(variant_dir, target_dirs[4])
    assert report.ok, failures(report)
    target = load_target(target_dirs[4], device="cpu")
    variant, plain = load_draft(variant_dir, target), load_draft(plain_dir, target)
    features = torch.randn(5, 96) * 3
    tokens, positions = torch.tensor([1, 2, 3, 4, 5]), torch.arange(5)
    with torch.no_grad():
        out_variant = variant.logits(variant(variant.fuse(features), tokens, positions)[0])
        out_plain = plain.logits(plain(plain.fuse(features), tokens, positions)[0])
    assert not torch.allclose(out_variant, out_plain)
    if flag in ("fc_norm", "norm_before_fc"):
        without = {n: t for n, t in random_draft_tensors(config).items() if not n.startswith(("fc_norm", "input_norm"))}
        missing = save_draft(tmp_path / "missing", config, without)
        assert "missing tensors" in failures(preflight(missing, target_dirs[4]))


def test_multi_layer_speculators_draft_replays_exactly(tmp_path, target_dirs):
    config = draft_config_dict(target_config(target_dirs[7]), draft_vocab=40, layout="speculators")
    config["transformer_layer_config"]["num_hidden_layers"] = 2
    draft_dir = save_draft(tmp_path / "d", config, random_draft_tensors(config), "speculators")
    report = preflight(draft_dir, target_dirs[7])
    assert report.ok, failures(report)
    target = load_target(target_dirs[7], device="cpu")
    draft = load_draft(draft_dir, target)
    assert len(draft.layers) == 2 and draft.layers[1].self_attn.q_proj.in_features == 32
    wiring = resolve_wiring(parse_draft_config(config), 7)
    output = output_ids_of(list(replay(target, draft, [4, 5, 6], wiring, ReplayConfig(4, 16))))
    assert output == plain_greedy(target, [4, 5, 6], 16)


def test_missing_target_or_draft_directory_is_bad_input(tmp_path, target_dirs):
    with pytest.raises(BadInput, match="not a local Hugging Face model directory"):
        preflight(tmp_path, tmp_path / "nope")
    report = preflight(tmp_path / "nope", target_dirs[4])
    assert "no such directory" in failures(report)


def test_draft_wider_than_target_brings_its_own_embedding(tmp_path, target_dirs):
    """target_hidden_size != hidden_size: fc maps 3 x 32 -> 48 and the checkpoint's embedding is used."""
    base = target_config(target_dirs[4])
    config = draft_config_dict(base, draft_vocab=40, hidden_size=48, target_hidden_size=32, num_attention_heads=4,
                               num_key_value_heads=2, intermediate_size=96)
    tensors = random_draft_tensors(config)
    assert tensors["fc.weight"].shape == (48, 96)
    report = preflight(save_draft(tmp_path / "no-embedding", config, tensors), target_dirs[4])
    assert "needs the draft's own embed_tokens.weight" in failures(report)
    tensors["own_embedding.weight"] = torch.randn(80, 48)
    draft_dir = save_draft(tmp_path / "d", config, tensors)
    report = preflight(draft_dir, target_dirs[4])
    assert report.ok, failures(report)
    target = load_target(target_dirs[4], device="cpu")
    draft = load_draft(draft_dir, target)
    assert torch.equal(draft.embed(torch.tensor([3])), tensors["own_embedding.weight"][3:4])
    output = output_ids_of(list(replay(target, draft, [1, 2, 3], draft.wiring, ReplayConfig(3, 10))))
    assert output == plain_greedy(target, [1, 2, 3], 10)
