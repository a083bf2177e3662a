"""Every published draft layout loads (read once, built on the target's device and dtype) and
replays exactly; a target or draft that cannot be read is a BadInput a user understands."""

from __future__ import annotations

import json

import pytest

from backend import BadInput
from tests.support.checkpoints import failures, statuses, target_config, write_draft


def replay_output(target, draft, wiring, prompt, num_steps, max_new_tokens):
    from backend.engine.replay import ReplayConfig, output_ids_of, replay

    return output_ids_of(list(replay(target, draft, prompt, wiring, ReplayConfig(num_steps, max_new_tokens))))


@pytest.mark.parametrize("layout", ["specforge", "eagle", "speculators"])
@pytest.mark.parametrize("draft_vocab", [40, None])
@pytest.mark.parametrize("layers", [4, 7])
def test_every_layout_loads_passes_preflight_and_replays(tmp_path, target_dirs, layout, draft_vocab, layers):
    import torch
    from safetensors.torch import load_file

    from backend.drafts.readings import declared_wiring
    from backend.engine.loading import build_draft, load_target, read_draft
    from backend.engine.preflight import check_draft, preflight
    from tests.support.oracle import plain_greedy

    target_dir = target_dirs[layers]
    draft_dir = write_draft(tmp_path / "draft", target_dir, layout, draft_vocab, dtype=torch.bfloat16)
    report = preflight(draft_dir, target_dir)
    assert report.ok, failures(report)
    assert report.result().to_dict()["aux_hf_indices"] == [2, layers // 2, layers - 3]
    assert "bfloat16" in " ".join(statuses(report)["pass"])
    target = load_target(target_dir, device="cpu", dtype="fp32")
    files = read_draft(draft_dir)
    assert check_draft(files, target.model.config).ok
    draft = build_draft(files, target)
    assert draft.has_vocab_mapping == (draft_vocab is not None)
    assert draft.fc.weight.dtype == torch.float32 and draft.fc.weight.device == target.device
    saved = (
        load_file(str(draft_dir / "model.safetensors"))
        if layout != "eagle"
        else torch.load(draft_dir / "pytorch_model.bin", weights_only=True)
    )
    assert torch.equal(draft.fc.weight, saved["fc.weight"].float())
    wiring = declared_wiring(draft.config, target.num_layers)
    assert wiring.aux_hf_indices == report.wiring.aux_hf_indices
    assert replay_output(target, draft, wiring, [1, 2, 3], 3, 12) == plain_greedy(target, [1, 2, 3], 12)


def test_file_names_are_normalised_and_remembered(tmp_path, target_dirs):
    from backend.engine.loading import read_draft

    files = read_draft(write_draft(tmp_path / "d", target_dirs[4]))  # SpecForge layout: midlayer.*
    assert "layers.0.mlp.up_proj.weight" in files.tensors and files.weights_file == "model.safetensors"
    assert files.file_name("layers.0.mlp.up_proj.weight") == "midlayer.mlp.up_proj.weight"
    assert any("midlayer" in note for note in files.renamed)


class NotATensor:
    def __init__(self):
        self.payload = "arbitrary object"


def test_pickle_that_is_not_weights_only_is_refused(tmp_path, target_dirs):
    import torch

    from backend.engine.loading import read_draft
    from backend.engine.preflight import preflight

    draft_dir = write_draft(tmp_path / "d", target_dirs[4], layout="eagle")
    state = torch.load(draft_dir / "pytorch_model.bin", weights_only=True)
    state["training_state"] = NotATensor()
    torch.save(state, draft_dir / "pytorch_model.bin")
    expected = (
        "pytorch_model.bin holds a tests.engine.test_loading.NotATensor object beyond tensors; refusing"
    )
    assert expected in failures(preflight(draft_dir, target_dirs[4]))
    import warnings

    with warnings.catch_warnings(record=True) as caught, pytest.raises(BadInput, match=expected):
        warnings.simplefilter("always")
        read_draft(draft_dir)
    assert not caught  # the refusal is the one line a user reads: torch's own warning is not printed
    with pytest.raises(BadInput) as refused:
        read_draft(draft_dir)
    assert "\x1b" not in str(refused.value) and "\n" not in str(refused.value)  # no terminal colours


def test_unreadable_target_or_draft_is_bad_input(tmp_path, target_dirs):
    from backend.engine.loading import load_target, read_draft, read_target_config

    with pytest.raises(BadInput, match="not a local Hugging Face model directory"):
        read_target_config(tmp_path / "nope")
    with pytest.raises(BadInput, match="not a local Hugging Face model directory"):
        load_target(tmp_path / "nope", device="cpu")
    with pytest.raises(BadInput, match="unknown dtype"):
        load_target(target_dirs[4], device="cpu", dtype="int3")
    with pytest.raises(BadInput, match="no such directory"):
        read_draft(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text(
        json.dumps({"hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 80})
    )
    with pytest.raises(BadInput, match="no model.safetensors, pytorch_model.bin or their sharded index"):
        read_draft(tmp_path / "empty")


def test_multi_layer_speculators_draft_replays_exactly(tmp_path, target_dirs):
    from backend.drafts.draft_config import parse_draft_config
    from backend.drafts.readings import declared_wiring
    from backend.engine.loading import load_target
    from backend.engine.preflight import load_checked_draft, preflight
    from tests.support.oracle import plain_greedy
    from tests.support.synthetic import draft_config_dict, random_draft_tensors, save_draft

    config = draft_config_dict(target_config(target_dirs[7]), draft_vocab=40, layout="speculators")
    config["transformer_layer_config"]["num_hidden_layers"] = 2
    draft_dir = save_draft(tmp_path / "d", config, random_draft_tensors(config), "speculators")
    report = preflight(draft_dir, target_dirs[7])
    assert report.ok, failures(report)
    target = load_target(target_dirs[7], device="cpu")
    draft, _ = load_checked_draft(draft_dir, target)
    assert len(draft.layers) == 2 and draft.layers[1].self_attn.q_proj.in_features == 32
    wiring = declared_wiring(parse_draft_config(config), 7)
    assert replay_output(target, draft, wiring, [4, 5, 6], 4, 16) == plain_greedy(target, [4, 5, 6], 16)


def test_draft_wider_than_target_brings_its_own_embedding(tmp_path, target_dirs):
    """target_hidden_size != hidden_size: fc maps 3 x 32 -> 48 and the checkpoint's embedding is used."""
    import torch

    from backend.engine.loading import load_target
    from backend.engine.preflight import load_checked_draft, preflight
    from tests.support.oracle import plain_greedy
    from tests.support.synthetic import draft_config_dict, random_draft_tensors, save_draft

    base = target_config(target_dirs[4])
    config = draft_config_dict(
        base,
        draft_vocab=40,
        hidden_size=48,
        target_hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
    )
    tensors = random_draft_tensors(config)
    assert tensors["fc.weight"].shape == (48, 96)
    report = preflight(save_draft(tmp_path / "no-embedding", config, tensors), target_dirs[4])
    assert "needs the draft's own embed_tokens.weight" in failures(report)
    tensors["own_embedding.weight"] = torch.randn(80, 48)
    draft_dir = save_draft(tmp_path / "d", config, tensors)
    report = preflight(draft_dir, target_dirs[4])
    assert report.ok, failures(report)
    target = load_target(target_dirs[4], device="cpu")
    draft, checked = load_checked_draft(draft_dir, target)
    assert torch.equal(
        draft.embed(torch.tensor([3]), draft.default_math), tensors["own_embedding.weight"][3:4]
    )
    assert replay_output(target, draft, checked.wiring, [1, 2, 3], 3, 10) == plain_greedy(
        target, [1, 2, 3], 10
    )


def test_sharded_bin_weights_load_and_a_bad_index_is_bad_input(tmp_path, target_dirs):
    """pytorch_model.bin.index.json shards (loaded with weights_only=True) load like one file; an
    index naming a shard that is missing, outside the folder, or lacking its tensors is refused."""
    import json

    import torch

    from backend import BadInput
    from backend.engine.loading import read_draft
    from tests.support.checkpoints import target_config
    from tests.support.synthetic import draft_config_dict, random_draft_tensors

    config = draft_config_dict(target_config(target_dirs[4]), draft_vocab=40)
    tensors = random_draft_tensors(config)
    draft_dir = tmp_path / "d"
    draft_dir.mkdir()
    (draft_dir / "config.json").write_text(json.dumps(config))
    names = sorted(tensors)
    halves = {"pytorch_model-00001-of-00002.bin": names[::2], "pytorch_model-00002-of-00002.bin": names[1::2]}
    for shard, members in halves.items():
        torch.save({n: tensors[n] for n in members}, draft_dir / shard)
    weight_map = {n: shard for shard, members in halves.items() for n in members}
    (draft_dir / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    files = read_draft(draft_dir)
    assert set(files.tensors) == set(tensors) and files.weights_file == "pytorch_model.bin.index.json"
    assert all(torch.equal(files.tensors[n], tensors[n]) for n in tensors)
    for broken, reason in (
        ({**weight_map, names[0]: "../elsewhere.bin"}, "is not a file in"),
        ({**weight_map, "extra.weight": "pytorch_model-00001-of-00002.bin"}, "lacks tensors"),
    ):
        (draft_dir / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": broken}))
        with pytest.raises(BadInput, match=reason):
            read_draft(draft_dir)


@pytest.mark.parametrize(
    "device, reason",
    [
        ("bogus", "not a device name"),
        ("meta", "SpecLens runs on cpu, cuda or mps"),
        ("cuda", "no CUDA device here"),
    ],
)
def test_a_device_that_is_not_here_is_bad_input(device, reason):
    import torch  # here, not in the parametrization: collection imports no torch (tests/conftest.py)

    from backend.engine.loading import pick_device

    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(BadInput, match=reason):
        pick_device(device)
    assert pick_device("cpu").type == "cpu"


def test_tensor_shapes_from_headers_match_the_loaded_draft(tmp_path, target_dirs):
    """The torch-free header read (what the lint uses in the dashboard's server) gives the shapes the
    loader gives, for one file and for shards; a .bin gives None (only torch reads it); a shard outside
    the folder is refused."""
    from safetensors.torch import save_file

    from backend.drafts.safetensors_header import tensor_shapes
    from backend.engine.loading import read_draft_tensors

    draft_dir = write_draft(tmp_path / "one", target_dirs[4])
    loaded, _ = read_draft_tensors(draft_dir)
    assert tensor_shapes(draft_dir) == {n: list(t.shape) for n, t in loaded.items()}
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "config.json").write_text((draft_dir / "config.json").read_text())
    names = sorted(loaded)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, members in halves.items():
        save_file({n: loaded[n].contiguous() for n in members}, str(sharded / shard))
    weight_map = {n: shard for shard, members in halves.items() for n in members}
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert tensor_shapes(sharded) == {n: list(t.shape) for n, t in loaded.items()}
    (sharded / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {**weight_map, names[0]: "../one/model.safetensors"}})
    )
    with pytest.raises(BadInput, match="is not a file in"):
        tensor_shapes(sharded)
    assert tensor_shapes(tmp_path) is None  # no safetensors weights at all
