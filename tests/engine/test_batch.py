"""The batched replay (backend/engine/batch.py): every sample of a batch gets the records its replay
alone yields, with ragged prompts, samples finishing at different steps, and llama.cpp's reading
(verify forwards of different lengths in one step)."""

from __future__ import annotations

import pytest


def _prompts(vocab: int, count: int = 5) -> list[list[int]]:
    import torch

    generator = torch.Generator().manual_seed(11)
    return [torch.randint(1, vocab, (3 + 4 * i,), generator=generator).tolist() for i in range(count)]


def _by_sample(stream, count: int) -> list[list]:
    records, ended = [[] for _ in range(count)], []
    for index, record, last in stream:
        assert index not in ended  # nothing of a sample after its last record
        records[index].append(record)
        if last:
            ended.append(index)
    assert sorted(ended) == list(range(count))
    return records


def _same(lone: list, batched: list) -> None:
    from backend.run.records import PrefillRecord
    from backend.target.lean_target import within_rounding  # within the rounding of more rows' products

    assert [type(r) for r in lone] == [type(r) for r in batched]
    for a, b in zip(lone, batched, strict=True):
        if isinstance(a, PrefillRecord):  # the prompts' prefills run packed in one forward
            assert a.first_token == b.first_token
            assert within_rounding(a.aux_features, b.aux_features)
            continue
        assert (a.step_index, a.position, a.pending_token) == (b.step_index, b.position, b.pending_token)
        assert (a.drafted_ids, a.accepted_count, a.bonus_id) == (b.drafted_ids, b.accepted_count, b.bonus_id)
        assert (a.committed_ids, a.target_argmax_ids) == (b.committed_ids, b.target_argmax_ids)
        # the arithmetic may round differently over more rows; what the run keeps stays within it
        assert within_rounding(a.aux_features, b.aux_features)
        assert within_rounding(a.draft_hidden, b.draft_hidden)
        assert a.draft_probs == pytest.approx(b.draft_probs, abs=1e-5)


@pytest.mark.parametrize("name", ["random-L2", "random-L6-eagle", "copy-L4-bigram", "copy-L5-context"])
def test_each_sample_of_a_batch_replays_as_it_would_alone(pairs, name):
    from backend.engine.batch import replay_batch
    from backend.engine.replay import ReplayConfig, output_ids_of, replay
    from backend.run.records import PrefillRecord, StepRecord

    pair = pairs[name]
    prompts = _prompts(pair.target.vocab_size)
    config = ReplayConfig(num_steps=3, max_new_tokens=20)
    batched = _by_sample(
        replay_batch(pair.target, pair.draft, pair.wiring, prompts, [config] * len(prompts)), len(prompts)
    )
    for prompt, records in zip(prompts, batched, strict=True):
        _same(list(replay(pair.target, pair.draft, prompt, pair.wiring, config)), records)
        assert isinstance(records[0], PrefillRecord) and all(isinstance(r, StepRecord) for r in records[1:])
        assert len(output_ids_of(records)) <= 20


def test_llamacpp_reading_verifies_shorter_chunks_beside_full_ones(pairs):
    """llama.cpp drafts fewer tokens near the budget, so one step of the batch verifies chunks of two
    lengths (prompts whose outputs stand at different counts); each still equals its lone replay."""
    from backend.engine.batch import replay_batch
    from backend.engine.replay import ReplayConfig, replay

    pair = pairs["copy-L5-context"]
    prompts = _prompts(pair.target.vocab_size, 4)
    for budget in (6, 9):
        config = ReplayConfig(num_steps=4, max_new_tokens=budget, accounting="llamacpp")
        batched = _by_sample(
            replay_batch(pair.target, pair.draft, pair.wiring, prompts, [config] * len(prompts)), len(prompts)
        )
        for prompt, records in zip(prompts, batched, strict=True):
            _same(list(replay(pair.target, pair.draft, prompt, pair.wiring, config)), records)


def test_trees_and_sampled_acceptance_are_not_batched(pairs):
    from backend.engine.batch import batchable, replay_batch
    from backend.engine.replay import ReplayConfig
    from backend.engine.sampling import Sampling

    pair = pairs["copy-L4-bigram"]
    assert batchable(ReplayConfig(num_steps=3))
    for config in (
        ReplayConfig(num_steps=3, topk=2, num_draft_tokens=5),
        ReplayConfig(sampling=Sampling(1.0)),
    ):
        assert not batchable(config)
        with pytest.raises(ValueError, match="greedy chain"):
            next(replay_batch(pair.target, pair.draft, pair.wiring, [[1, 2]], [config]))


def test_prefills_are_cut_into_forwards_of_at_most_the_row_budget():
    from backend.engine.batch import prefill_groups

    assert prefill_groups([3, 4, 2, 9, 1], rows=8) == [[0, 1], [2], [3], [4]]
    assert prefill_groups([5, 3, 8], rows=8) == [[0, 1], [2]]  # a prompt as long as the budget runs alone
    assert prefill_groups([20], rows=8) == [[0]]  # a longer one too
    assert prefill_groups([], rows=8) == []


def test_near_ties_are_the_rows_whose_top_two_logits_lie_within_the_share():
    import torch

    from backend.engine.sampling import near_tie_rows

    logits = torch.tensor([[10.0, 10.0005, 0.0], [10.0, 5.0, 0.0], [-30.0, 2.0, 2.002]])
    assert near_tie_rows(logits, 3) == [0, 2]  # gaps 5e-4 <= 1e-4 * 10 and 2e-3 <= 1e-4 * 30
    assert near_tie_rows(logits, 1) == [0]  # only the rows the output read
    assert near_tie_rows(logits * torch.tensor([1.0, 1.0, 10.0]), 3) == [0]  # row 2: 20.02 vs 2.0


def test_a_batched_sample_may_differ_from_its_lone_replay_only_at_a_recorded_near_tie():
    from backend.run.records import PrefillRecord, StepRecord
    from tests.support.batched import same_or_near_tie

    prefill = PrefillRecord([1, 2], 5, 0.0, None)

    def step(argmax, accepted, ties):
        emitted = argmax[:accepted] + [argmax[accepted]]
        return StepRecord(0, 2, 5, [7, 8], accepted, argmax[accepted], emitted, argmax, near_tie_rows=ties)

    lone = [prefill, step([7, 9, 4], 1, [])]
    assert same_or_near_tie(lone, lone) is None
    assert same_or_near_tie(lone, [prefill, step([7, 8, 4], 2, [1])]) == 2 + 1 + 1  # row 1 chose token 4
    with pytest.raises(AssertionError, match="without a recorded near-tie"):
        same_or_near_tie(lone, [prefill, step([7, 8, 4], 2, [0])])


def test_chain_and_tree_steps_record_every_near_tie_the_output_read(pairs):
    """A head whose odd rows copy their even neighbours exactly: every verify row's top two logits tie,
    so every row a step read (0..a: the chain, or the tree's root and accepted path) is recorded."""
    import copy
    from dataclasses import replace

    import torch

    from backend.engine.replay import ReplayConfig, StepRecord, replay
    from backend.target.lean_target import target_runner

    pair = pairs["random-L2"]
    model = copy.deepcopy(pair.target.model)
    with torch.no_grad():
        model.lm_head.weight[1::2] = model.lm_head.weight[0::2]
    tied = replace(pair.target, model=model, runner=target_runner(model))
    for config in (ReplayConfig(3, 16), ReplayConfig(3, 16, topk=2, num_draft_tokens=5)):
        steps = [
            r for r in replay(tied, pair.draft, [3, 7, 11], pair.wiring, config) if isinstance(r, StepRecord)
        ]
        assert steps and all(s.near_tie_rows == list(range(s.accepted_count + 1)) for s in steps)
    plain = [r for r in replay(pair.target, pair.draft, [3, 7, 11], pair.wiring, ReplayConfig(3, 16))]
    assert all(not r.near_tie_rows for r in plain if isinstance(r, StepRecord))  # random logits: none
