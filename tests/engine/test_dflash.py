"""The DFlash replay (backend/engine/dflash_step.py): exact in fp32, its blocks as z-lab's loop builds
them, and bad drafts refused in one line."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def dflash_pair(tmp_path_factory):
    from backend.engine.dflash_step import load_dflash
    from backend.engine.loading import load_target
    from tests.support.synthetic import (
        TargetShape,
        dflash_config_dict,
        make_target,
        random_dflash_tensors,
        save_dflash,
    )

    root = tmp_path_factory.mktemp("dflash")
    model = make_target(
        root / "target", TargetShape(num_layers=4, hidden=64, vocab=128, eos_token_id=None), seed=3
    )
    config = dflash_config_dict(model.config, block_size=5, target_layer_ids=[0, 1, 2])
    save_dflash(root / "draft", config, random_dflash_tensors(config, std=2.0))
    target = load_target(root / "target", device="cpu", dtype="fp32")
    return root, model, target, load_dflash(root / "draft", target), config


def greedy(model, prompt: list[int], new: int) -> list[int]:
    import torch

    out = model.generate(torch.tensor([prompt]), max_new_tokens=new, do_sample=False, min_new_tokens=new)
    return out[0, len(prompt) :].tolist()


@pytest.mark.parametrize("num_steps", [1, 4, 7])
def test_the_dflash_replay_is_the_target_s_greedy_output_and_each_block_is_z_lab_s(dflash_pair, num_steps):
    """fp32: the output equals generate(); every step's drafts equal a block computed from scratch
    (the context: the target's states at every position before the pending token, no cache)."""
    import torch

    from backend.engine.dflash_step import dflash_wiring
    from backend.engine.replay import ReplayConfig, output_ids_of, replay
    from backend.run.records import StepRecord

    _, model, target, draft, _ = dflash_pair
    prompt, new = [3, 17, 42, 9, 11], 40
    wiring = dflash_wiring(draft.config)
    records = list(replay(target, draft, prompt, wiring, ReplayConfig(num_steps, new)))
    output = output_ids_of(records)
    assert output == greedy(model, prompt, new)
    steps = [r for r in records if isinstance(r, StepRecord)]
    assert steps and all(len(s.drafted_ids) == num_steps for s in steps)
    with torch.inference_mode():
        tokens = prompt + output
        hidden = model(torch.tensor([tokens]), output_hidden_states=True).hidden_states
        states = torch.cat([hidden[i][0] for i in wiring.aux_hf_indices], dim=-1)
        for step in steps:
            n = step.position
            context = draft.context(states[:n], torch.arange(n))
            ids = torch.tensor([step.pending_token] + [draft.mask_token_id] * num_steps)
            block = draft.block(ids, torch.arange(n, n + num_steps + 1), context)
            assert draft.logits(block[1:]).argmax(-1).tolist() == step.drafted_ids, step.step_index


def test_bad_dflash_drafts_are_refused_in_one_line(dflash_pair, tmp_path):
    from backend import BadInput
    from backend.drafts.dflash_config import method_of
    from backend.engine.dflash_step import load_dflash
    from tests.support.synthetic import random_dflash_tensors, save_dflash

    root, _, target, _, config = dflash_pair
    cases = {
        "mask": (
            {"dflash_config": {**config["dflash_config"], "mask_token_id": 128}},
            "past the target's embedding",
        ),
        "layer": (
            {"dflash_config": {**config["dflash_config"], "target_layer_ids": [0, 1, 4]}},
            "names layer 4",
        ),
        "block": ({"block_size": 1}, "block_size must be an integer >= 2"),
        "width": ({"hidden_size": 32}, "hidden_size 32"),
        "sliding": ({"layer_types": ["sliding_attention"] * 2}, "config.json: sliding-window layers"),
        "yarn": ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "config.json: rope_scaling"),
    }
    for name, (change, said) in cases.items():
        save_dflash(tmp_path / name, config | change, random_dflash_tensors(config))
        with pytest.raises(BadInput, match=said):
            load_dflash(tmp_path / name, target)
    tensors = random_dflash_tensors(config)
    del tensors["fc.weight"]
    save_dflash(tmp_path / "lacking", config, tensors)
    with pytest.raises(BadInput, match=r"model.safetensors: missing fc.weight"):
        load_dflash(tmp_path / "lacking", target)
    assert method_of(json.loads((root / "draft" / "config.json").read_text())) == "dflash"
    with pytest.raises(BadInput, match="DFlash2"):
        method_of({"architectures": ["DFlash2DraftModel"]})


def test_a_draft_trained_by_the_dflash_objective_is_accepted(tmp_path):
    """demo/train_dflash.py's objective (anchors, blocks of masks, context before each anchor) on a
    target with no attention (a bigram): the trained draft's blocks are accepted where a random one's
    are not, and the replay stays the target's greedy output."""
    import torch

    from backend.drafts.dflash_config import parse_dflash_config
    from backend.engine.batch import accept_lengths
    from backend.engine.dflash_model import DFlashDraft
    from backend.engine.dflash_step import dflash_wiring
    from backend.engine.loading import load_target
    from backend.target.capture import AuxCapture
    from demo import train_dflash
    from tests.support.synthetic import TargetShape, dflash_config_dict, make_target

    model = make_target(
        tmp_path / "bigram", TargetShape(num_layers=4, hidden=64, vocab=64), seed=5, attention_scale=0.0
    )
    model.requires_grad_(False)
    config = dflash_config_dict(model.config, num_layers=1, block_size=4, target_layer_ids=[0, 1])
    draft = DFlashDraft(parse_dflash_config(config), model.get_input_embeddings(), model.lm_head.weight)
    generator = torch.Generator().manual_seed(0)
    samples = []
    with torch.no_grad(), AuxCapture(model, [1, 2]) as capture:
        for _ in range(32):
            ids = torch.randint(0, 64, (1, 4), generator=generator)
            ids = model.generate(ids, max_new_tokens=32, do_sample=False, min_new_tokens=32)[0]
            model.model(input_ids=ids[None])
            states = torch.cat([capture.captured[i][0] for i in (1, 2)], dim=-1)
            samples.append({"input_ids": ids, "loss_mask": torch.ones_like(ids), "states": states})
    target = load_target(tmp_path / "bigram", device="cpu", dtype="fp32")
    prompts = [[3, 7, 9], [11, 2, 5], [40, 41, 42]]

    def accepted() -> float:
        with torch.inference_mode():
            counts = accept_lengths(target, draft, prompts, dflash_wiring(draft.config), 3, 30)
        return sum(sum(c) for c in counts) / sum(len(c) for c in counts)

    before = accepted()
    curve = train_dflash.train(
        draft, samples, train_dflash.Schedule(epochs=5, anchors=16, batch=4, lr=3e-3), log=lambda _: None
    )
    assert curve[-1]["loss"] < curve[0]["loss"] and curve[-1]["slot_accuracy"] > 0.5
    after = accepted()
    assert after > before + 0.5, (before, after)

    # teacher-forced blocks over the target's own continuations: the predicted accept length is the live
    # one's order (the context of a DFlash block is always the target's states)
    from types import SimpleNamespace

    from backend.diagnostics.dflash_teacher import slot_accuracy
    from backend.engine.replay import ReplayConfig, replay
    from backend.run.records import StepRecord

    with torch.no_grad():  # the live prompts' own continuations (30 tokens, as the replays ran)
        continued = [
            model.generate(torch.tensor([p]), max_new_tokens=30, do_sample=False)[0].tolist() for p in prompts
        ]
    continuations = [
        SimpleNamespace(input_ids=ids, loss_mask=[0] * len(p) + [1] * (len(ids) - len(p)))
        for p, ids in zip(prompts, continued, strict=True)
    ]
    taught = slot_accuracy(target, draft, dflash_wiring(draft.config), continuations, 3)
    assert taught.n_anchors > 50 and taught.prefix_rates == sorted(taught.prefix_rates, reverse=True)
    with torch.inference_mode():  # each step's accepted count is the teacher's run at the anchor it starts at
        replays = [
            list(replay(target, draft, p, dflash_wiring(draft.config), ReplayConfig(3, 30))) for p in prompts
        ]
    compared = [
        (taught.runs[(number, step.position)], step.accepted_count)
        for number, records in enumerate(replays)
        for step in records
        if isinstance(step, StepRecord) and (number, step.position) in taught.runs
    ]
    assert len(compared) > 10 and all(run == count for run, count in compared), compared

    _accuracy_vs_live(target, draft, prompts, continuations, replays, taught)

    # the layer probe: the same weights declaring the layers one higher are found out, and the fix named
    from backend.diagnostics.dflash_probe import probe_layers

    probed = [
        SimpleNamespace(input_ids=s["input_ids"].tolist(), loss_mask=[1] * len(s["input_ids"]))
        for s in samples[:12]
    ]
    draft.__dict__["config"] = parse_dflash_config(
        config | {"dflash_config": {**config["dflash_config"], "target_layer_ids": [1, 2]}}
    )
    result = probe_layers(target, draft, probed, anchors=16)
    assert result.best.target_layer_ids == [0, 1] and not result.confirmed, result.verdict
    assert (
        result.fix == {"dflash_config": {"target_layer_ids": [0, 1]}} and "declared -1" in result.best.label
    )


def _accuracy_vs_live(target, draft, prompts, continuations, replays, taught) -> None:
    """Accuracy vs live on a DFlash draft: the teacher's blocks at every anchor beside the live replays;
    fed other layers than the declared ones (a claimed training wiring), the teacher predicts less."""
    from types import SimpleNamespace

    from backend.diagnostics.agreement import agreement_of, teacher_vs_live
    from backend.engine.dflash_step import dflash_wiring
    from backend.engine.replay import ReplayConfig
    from backend.run.records import StepRecord
    from backend.run.wiring import Wiring

    asked = [
        SimpleNamespace(prompt_ids=p, input_ids=c.input_ids, loss_mask=c.loss_mask, source=None, index=n)
        for n, (p, c) in enumerate(zip(prompts, continuations, strict=True))
    ]
    rows = teacher_vs_live(target, draft, dflash_wiring(draft.config), asked, ReplayConfig(3, 30))
    for number, (row, records) in enumerate(zip(rows, replays, strict=True)):
        steps = [r.accepted_count + 1 for r in records if isinstance(r, StepRecord)]
        assert row.live_accept_length == pytest.approx(sum(steps) / len(steps))
        mine = [run for (n, _), run in taught.runs.items() if n == number]
        assert row.predicted_accept_length == pytest.approx(1 + sum(mine) / len(mine))
        assert len(row.acc_per_step) == 3
    assert "DFlash" in agreement_of(rows, draft).definition
    claimed = Wiring((3, 4), "claimed training wiring")  # HF 3, 4: not the layers it was trained on
    other = teacher_vs_live(
        target, draft, dflash_wiring(draft.config), asked, ReplayConfig(3, 30), training_wiring=claimed
    )
    assert sum(r.predicted_accept_length for r in other) < sum(r.predicted_accept_length for r in rows)


def test_a_dflash_block_through_the_sampled_path_is_the_chain_and_samples_run(dflash_pair):
    """The sampled acceptance walks a DFlash block as a chain (tree_step.block_tree): at temperature 0
    forced through that path it gives the chain's drafts, counts and output; at temperature 0.8 (SGLang's
    rule) every step's accepted drafts are a prefix of its block, each with its acceptance probability."""
    from backend.engine.dflash_step import dflash_wiring
    from backend.engine.replay import ReplayConfig, output_ids_of, replay
    from backend.engine.sampling import Sampling
    from backend.run.records import StepRecord

    _, _, target, draft, _ = dflash_pair
    prompt, wiring = [3, 17, 42, 9, 11], dflash_wiring(draft.config)
    chain = list(replay(target, draft, prompt, wiring, ReplayConfig(4, 30)))
    forced = list(replay(target, draft, prompt, wiring, ReplayConfig(4, 30, force_tree=True)))
    assert output_ids_of(forced) == output_ids_of(chain)
    steps = lambda records: [(r.drafted_ids, r.accepted_count) for r in records if isinstance(r, StepRecord)]  # noqa: E731
    assert steps(forced) == steps(chain)
    sampled = list(replay(target, draft, prompt, wiring, ReplayConfig(4, 30, sampling=Sampling(0.8, seed=7))))
    records = [r for r in sampled if isinstance(r, StepRecord)]
    assert records and all(len(r.drafted_ids) == 4 and 0 <= r.accepted_count <= 4 for r in records)
    assert all(r.committed_ids[: r.accepted_count] == r.drafted_ids[: r.accepted_count] for r in records)
    assert all(r.tree.expected_accepted is not None for r in records)
    again = list(replay(target, draft, prompt, wiring, ReplayConfig(4, 30, sampling=Sampling(0.8, seed=7))))
    assert output_ids_of(again) == output_ids_of(sampled)
