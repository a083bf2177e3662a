"""A target split across devices (accelerate's dispatch): on this CPU machine the split is forced by
offloading half the decoder layers to disk, so every offloaded layer runs through accelerate's hooks
(weights loaded just in time), and the replay, chain and tree, must equal the undispatched one."""

from __future__ import annotations

import importlib.util
import json

import pytest

from backend import BadInput

# find_spec, not importorskip: importing accelerate imports torch, which collection must not
pytestmark = pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="needs accelerate")


def split_map(num_layers: int) -> str:
    device_map = {
        "model.embed_tokens": "cpu",
        "model.norm": "cpu",
        "model.rotary_emb": "cpu",
        "lm_head": "cpu",
    }
    for layer in range(num_layers):
        device_map[f"model.layers.{layer}"] = "disk" if layer % 2 else "cpu"
    return json.dumps(device_map)


@pytest.mark.slow  # disk offload reloads weights at every forward
def test_a_dispatched_target_replays_exactly_like_the_plain_one():
    from backend.defaults import DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET
    from backend.engine.loading import load_target
    from backend.engine.preflight import load_checked_draft
    from backend.engine.replay import ReplayConfig, output_ids_of, replay
    from backend.target.dispatch import placement

    plain = load_target(DEMO_TARGET, device="cpu", dtype="fp32")
    split = load_target(DEMO_TARGET, device="cpu", dtype="fp32", device_map=split_map(plain.num_layers))
    assert placement(split.model) == {"cpu": 4 + plain.num_layers // 2, "disk": plain.num_layers // 2}
    assert placement(plain.model) is None and str(split.device) == "cpu"
    record = json.loads(DEMO_EVAL.read_text().splitlines()[0])
    prompt = record["input_ids"][: record["n_prompt_tokens"]]
    for config in (ReplayConfig(4, 40), ReplayConfig(3, 24, topk=3, num_draft_tokens=6)):
        runs = []
        for target in (plain, split):
            draft, report = load_checked_draft(DEMO_DRAFTS / "final", target)
            records = list(replay(target, draft, prompt, report.wiring, config))
            runs.append((output_ids_of(records), [(s.drafted_ids, s.accepted_count) for s in records[1:]]))
        assert runs[0] == runs[1] and len(runs[0][0]) == config.max_new_tokens


def test_bad_device_maps_are_refused_in_one_line(tmp_path):
    from backend.target.dispatch import dispatch_kwargs, parse_max_memory

    for text, reason in (
        ("everywhere", "not one of auto"),
        ("{not json", "not valid JSON"),
        ('{"model.layers.0": "gpu7"}', "want a GPU index"),
        (str(tmp_path / "missing.json"), "a JSON file"),
    ):
        with pytest.raises(BadInput, match=reason):
            dispatch_kwargs(text, None)
    with pytest.raises(BadInput, match="needs --device-map"):
        dispatch_kwargs(None, "0=10GiB")
    assert parse_max_memory("0=20GiB, cpu=64GiB") == {0: "20GiB", "cpu": "64GiB"}
    assert dispatch_kwargs("auto", "cpu=1GiB")["max_memory"] == {"cpu": "1GiB"}
