"""llama.cpp's step accounting (backend/engine/step_state.py ACCOUNTING "llamacpp"): fewer drafts near
the end, a plain decode for the last token, a drafted end-of-generation token taken as the target's own;
the output still equals the target's plain greedy output token for token."""

from __future__ import annotations

import pytest

from backend.run.records import verify_counts

CASES = [
    ("copy-L4-bigram", [1, 5, 9], 4, 17),
    ("copy-L4-bigram", [30], 3, 12),
    ("random-L2", [3, 17, 40, 2], 2, 9),
]


@pytest.mark.parametrize("name, prompt, num_steps, max_new", CASES)
def test_drafts_shrink_to_the_budget_and_the_output_is_plain_greedy(pairs, name, prompt, num_steps, max_new):
    from backend.engine.replay import ReplayConfig, output_ids_of, replay
    from backend.run.records import StepRecord
    from tests.support.oracle import plain_greedy

    pair = pairs[name]
    eos = frozenset(pair.target.eos_token_ids)
    config = ReplayConfig(num_steps, max_new, accounting="llamacpp", stop_ids=eos)
    records = list(replay(pair.target, pair.draft, prompt, pair.wiring, config))
    output = output_ids_of(records)
    greedy = plain_greedy(pair.target, prompt, max_new)
    stop = next((i for i, t in enumerate(greedy) if t in eos), None)
    assert output == (greedy if stop is None else greedy[: stop + 1])
    produced = 1
    steps = [r for r in records if isinstance(r, StepRecord)]
    for index, step in enumerate(steps):
        assert len(step.drafted_ids) == min(num_steps, max_new - produced - 1)
        if not step.drafted_ids:  # a plain decode: the last token, one of it, no verify step
            assert index == len(steps) - 1 and step.committed_ids == [step.bonus_id]
        produced += len(step.committed_ids)
    assert produced == len(output)
    assert verify_counts(steps) == [s.accepted_count for s in steps if s.drafted_ids]
    # the same request under fixed-k accounting drafts K every step and emits the same tokens
    fixed = list(replay(pair.target, pair.draft, prompt, pair.wiring, ReplayConfig(num_steps, max_new)))
    assert output_ids_of(fixed) == output
    assert all(len(r.drafted_ids) == num_steps for r in fixed if isinstance(r, StepRecord))


def test_the_last_token_is_a_plain_decode_when_one_is_left(pairs):
    """With every draft accepted (a copy draft on a bigram target), K = 3 and 10 tokens: the steps after
    the first token draft 3, 3 (8 out), then 1 (9 out) and one plain decode (10)."""
    from backend.engine.replay import ReplayConfig, replay
    from backend.run.records import StepRecord

    pair = pairs["copy-L4-bigram"]
    config = ReplayConfig(3, 10, accounting="llamacpp", stop_ids=frozenset())
    steps = [
        r
        for r in replay(pair.target, pair.draft, [1, 5, 9], pair.wiring, config)
        if isinstance(r, StepRecord)
    ]
    drafted = [len(s.drafted_ids) for s in steps]
    accepted = [s.accepted_count for s in steps]
    assert sum(len(s.committed_ids) for s in steps) == 9
    # every drafted count follows the budget; whatever was accepted, the plain decode comes last
    assert drafted[-1] in (0, 1, 2, 3) and all(d > 0 for d in drafted[:-1])
    if drafted[-1] == 0:
        assert accepted[-1] == 0 and len(steps[-1].committed_ids) == 1


def test_a_drafted_end_of_generation_ends_the_accepted_prefix_unless_last():
    from backend.engine.chain_step import accepted_prefix_length

    assert accepted_prefix_length([1, 7, 3], [1, 7, 3, 4], {7}) == 1  # EOG d_2 is the target's token
    assert accepted_prefix_length([1, 2, 7], [1, 2, 7, 4], {7}) == 3  # the last draft: accepted
    assert accepted_prefix_length([1, 7, 3], [1, 7, 3, 4]) == 3  # other engines accept it
    assert accepted_prefix_length([7, 2], [7, 2, 4], {7}) == 0


def test_the_llamacpp_reading_refuses_trees_and_sampling():
    from backend.engine.step_state import ReplayConfig

    with pytest.raises(ValueError, match="greedy chain"):
        ReplayConfig(3, 10, topk=2, num_draft_tokens=4, accounting="llamacpp")
    with pytest.raises(ValueError, match="accounting"):
        ReplayConfig(3, 10, accounting="sometimes")
    assert ReplayConfig(4, 96, accounting="llamacpp").drafts_at(93) == 2
    assert ReplayConfig(4, 96, accounting="llamacpp").drafts_at(95) == 0
    assert ReplayConfig(4, 96).drafts_at(95) == 4


def test_llamacpp_stops_at_every_end_of_generation_text():
    from backend.run.stop_ids import llamacpp_stop_ids

    class Vocab:
        def get_vocab(self):
            return {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2, "hello": 3, "<|file_sep|>": 4}

    assert llamacpp_stop_ids(Vocab(), (2,)) == {0, 2, 4}
    assert llamacpp_stop_ids(None, (5,)) == {5}
