"""Exactness: the replay's output is the target's plain greedy output, token for token, and its
drafts and accept counts equal a cache-free full-recompute oracle."""

from __future__ import annotations

import pytest

PROMPTS = {
    "random-L2": [[3, 17, 40, 2], [90, 1], [5, 5, 5, 5, 5, 5, 11]],
    "random-L6-eagle": [[1, 2, 3, 4, 5], [100, 64, 7], [12]],
    "copy-L4-bigram": [[1, 5, 9], [2, 4, 6, 8, 10], [30]],
    "copy-L5-context": [[1, 5, 9, 3, 7], [2, 4, 6, 8, 10, 12], [30, 1, 20]],
}
NUM_STEPS = [1, 3, 5]
MAX_NEW = 32  # every rollback path within it (test_accept_patterns_cover_rejection_partial_and_full)


@pytest.fixture(scope="module")
def exactness(pairs):
    """exactness(name, K) -> [(prompt, replay records, greedy output, oracle output, oracle steps)],
    computed once per (pair, K) for every test of this module that asks."""
    from backend.engine.replay import ReplayConfig, replay
    from tests.support.oracle import oracle_replay, plain_greedy

    done: dict[tuple[str, int], list] = {}

    def run(name: str, num_steps: int) -> list:
        if (name, num_steps) not in done:
            pair, results = pairs[name], []
            for prompt in PROMPTS[name]:
                records = list(
                    replay(pair.target, pair.draft, prompt, pair.wiring, ReplayConfig(num_steps, MAX_NEW))
                )
                greedy = plain_greedy(pair.target, prompt, MAX_NEW)
                oracle_output, oracle_steps = oracle_replay(
                    pair.target, pair.draft, prompt, pair.wiring, num_steps, MAX_NEW
                )
                results.append((prompt, records, greedy, oracle_output, oracle_steps))
            done[name, num_steps] = results
        return done[name, num_steps]

    return run


# The fast loop keeps every K on random-L2 and K=3 on each other pair (every pair's exactness, and
# rejections and rollbacks at K > 1); the other cases run with the whole suite.
SLOW_CASES = {
    ("random-L6-eagle", 1),
    ("random-L6-eagle", 5),
    ("copy-L4-bigram", 1),
    ("copy-L4-bigram", 5),
    ("copy-L5-context", 1),
    ("copy-L5-context", 5),
}


@pytest.mark.parametrize(
    "name, num_steps",
    [
        pytest.param(name, k, marks=pytest.mark.slow) if (name, k) in SLOW_CASES else (name, k)
        for name in PROMPTS
        for k in NUM_STEPS
    ],
)
def test_replay_equals_greedy_and_oracle(exactness, name, num_steps):
    from backend.engine.replay import StepRecord, output_ids_of

    for prompt, records, greedy, oracle_output, oracle_steps in exactness(name, num_steps):
        output = output_ids_of(records)
        assert output == greedy, f"{name} K={num_steps} prompt={prompt}"
        steps = [r for r in records if isinstance(r, StepRecord)]
        assert output == oracle_output
        assert [(s.drafted_ids, s.accepted_count) for s in steps] == oracle_steps
        for step in steps:
            assert len(step.drafted_ids) == num_steps and len(step.target_argmax_ids) == num_steps + 1
            assert step.bonus_id == step.target_argmax_ids[step.accepted_count]
            assert (
                step.committed_ids
                == (step.drafted_ids[: step.accepted_count] + [step.bonus_id])[: len(step.committed_ids)]
            )


@pytest.mark.parametrize("name", ["random-L2", "copy-L5-context"])
def test_transformers_own_forward_replays_exactly_too(pairs, name, monkeypatch):
    """Llama targets on the CPU take the lean forward by default (backend/target/lean_target.py);
    loaded with SPECLENS_LEAN_TARGET=0 they run transformers' forward on a DynamicCache, as every
    other target does, and the replay is exact there as well."""
    from dataclasses import replace

    from transformers import DynamicCache

    from backend.engine.replay import ReplayConfig, output_ids_of, replay
    from backend.target.lean_target import target_runner
    from tests.support.oracle import plain_greedy

    monkeypatch.setenv("SPECLENS_LEAN_TARGET", "0")
    pair = pairs[name]
    target = replace(pair.target, runner=target_runner(pair.target.model))  # as loaded with it set
    assert isinstance(target.runner.new_cache().inner, DynamicCache)
    for prompt in PROMPTS[name]:
        records = list(replay(target, pair.draft, prompt, pair.wiring, ReplayConfig(3, MAX_NEW)))
        assert output_ids_of(records) == plain_greedy(pair.target, prompt, MAX_NEW), prompt


def test_accept_patterns_cover_rejection_partial_and_full(exactness):
    """The exactness matrix above must exercise every rollback path, or it proves little."""
    from backend.engine.replay import StepRecord

    seen = {
        (name, k): [
            r.accepted_count
            for _, records, *_ in exactness(name, k)
            for r in records
            if isinstance(r, StepRecord)
        ]
        for name in PROMPTS
        for k in NUM_STEPS
        if (name, k) not in SLOW_CASES
    }
    every = [(k, a) for (_, k), counts in seen.items() for a in counts]
    assert any(a == 0 for _, a in every), "no step rejected d_1"
    assert any(k > 1 and 0 < a < k for k, a in every), "no partial acceptance"
    assert any(a == k for k, a in every), "no step accepted all K drafts"
    assert any(k > 1 and a == k for k, a in every), "no step accepted all of K > 1 drafts"
    bigram = seen[("copy-L4-bigram", 3)]
    assert sum(bigram) / len(bigram) >= 0.9, "the copy draft should get d_1 right on its bigram target"


def test_records_carry_probabilities_and_hidden_states(pairs):
    from backend.engine.replay import ReplayConfig, replay
    from backend.run.records import PrefillRecord

    pair = pairs["random-L2"]
    records = list(replay(pair.target, pair.draft, [3, 17, 40, 2], pair.wiring, ReplayConfig(3, 20)))
    prefill, steps = records[0], records[1:]
    assert isinstance(prefill, PrefillRecord) and prefill.aux_features.shape == (4, 3 * 32)
    for step in steps:
        assert len(step.draft_probs) == 3 and all(0 < p <= 1 for p in step.draft_probs)
        assert all(
            len(top) == 5 and top[0] == d for top, d in zip(step.draft_top_ids, step.drafted_ids, strict=True)
        )
        assert all(a >= b for top in step.draft_top_probs for a, b in zip(top, top[1:], strict=False))
        assert len(step.target_argmax_probs) == 4
        kept = min(len(step.committed_ids), step.accepted_count) + 1  # no rows past the output
        assert step.aux_features.shape == (kept, 96)
        assert step.draft_hidden.shape == (3, 32)
        assert step.draft_ms > 0 and step.verify_ms > 0
    # positions advance by a + 1 per step
    for before, after in zip(steps, steps[1:], strict=False):
        assert after.position == before.position + before.accepted_count + 1


def test_recording_off_keeps_the_same_tokens(pairs):
    from backend.engine.batch import accept_lengths
    from backend.engine.replay import ReplayConfig, output_ids_of, replay

    pair = pairs["copy-L5-context"]
    on = list(replay(pair.target, pair.draft, [1, 5, 9], pair.wiring, ReplayConfig(3, 30)))
    off = list(replay(pair.target, pair.draft, [1, 5, 9], pair.wiring, ReplayConfig(3, 30, record=False)))
    assert output_ids_of(on) == output_ids_of(off)
    assert all(s.aux_features is None and not s.draft_top_ids and s.draft_hidden is None for s in off[1:])
    # the probabilities every run keeps (where acceptance is lost reads them) are the recorded run's
    for a, b in zip(on[1:], off[1:], strict=True):
        assert a.draft_probs == pytest.approx(b.draft_probs) and len(b.draft_probs) == len(b.drafted_ids)
        assert a.target_argmax_probs == pytest.approx(b.target_argmax_probs)
        entropies = b.tree.target_entropies  # nats, one per verify row; 0 only for a certain row
        assert len(entropies) == len(b.drafted_ids) + 1 and all(h >= 0 for h in entropies)
        assert a.tree.target_entropies == pytest.approx(entropies)
    assert off[0].aux_features is None
    assert accept_lengths(pair.target, pair.draft, [[1, 5, 9]], pair.wiring, 3, 30) == [
        [s.accepted_count for s in on[1:]]
    ]


def test_stops_at_eos_and_limit(pairs):
    from backend.engine.replay import ReplayConfig, output_ids_of, replay

    pair = pairs["random-L2"]  # eos id 7
    for prompt in PROMPTS["random-L2"]:
        output = output_ids_of(
            list(replay(pair.target, pair.draft, prompt, pair.wiring, ReplayConfig(4, 200)))
        )
        assert len(output) <= 200
        if 7 in output:
            assert output.index(7) == len(output) - 1
    limited = output_ids_of(list(replay(pair.target, pair.draft, [1, 2], pair.wiring, ReplayConfig(5, 3))))
    assert len(limited) <= 3


def test_bad_config_and_empty_prompt_are_refused(pairs):
    from backend.engine.replay import ReplayConfig, replay

    with pytest.raises(ValueError, match="num_steps"):
        ReplayConfig(0, 10)
    with pytest.raises(ValueError, match="max_new_tokens"):
        ReplayConfig(1, 0)
    pair = pairs["random-L2"]
    with pytest.raises(ValueError, match="empty"):
        list(replay(pair.target, pair.draft, [], pair.wiring, ReplayConfig(1, 4)))


def test_accept_rule():
    from backend.engine.chain_step import accepted_prefix_length

    assert accepted_prefix_length([1, 2, 3], [1, 2, 9, 4]) == 2
    assert accepted_prefix_length([5, 2, 3], [1, 2, 3, 4]) == 0
    assert accepted_prefix_length([1, 2, 3], [1, 2, 3, 4]) == 3


def test_commit_stops_at_eos_and_the_budget():
    from backend.engine.step_state import commit_within_budget

    assert commit_within_budget([4, 5, 6], produced=2, eos={9}, max_new_tokens=10) == ([4, 5, 6], False)
    assert commit_within_budget([4, 9, 6], produced=2, eos={9}, max_new_tokens=10) == ([4, 9], True)
    assert commit_within_budget([4, 5, 6], produced=8, eos={9}, max_new_tokens=10) == ([4, 5], True)


def test_accept_counts_follow_the_drafts_belief_on_a_bigram_target(tmp_path):
    """Target: next token f(x) whatever the context. Draft: believes map b (f with some entries
    wrong) and proposes d_j = b^(j+1)(x_{n-1}). So a = the longest j-prefix with b^(j+1) == f^(j+1)."""
    from backend.engine.loading import load_target
    from backend.engine.replay import ReplayConfig, StepRecord, output_ids_of, replay
    from tests.support.models import load_draft
    from tests.support.oracle import plain_greedy
    from tests.support.synthetic import (
        TargetShape,
        bigram_draft_tensors,
        corrupt_next_token_map,
        cyclic_next_token_map,
        draft_config_dict,
        make_bigram_target,
        save_draft,
    )

    follow = cyclic_next_token_map(48, seed=3)
    believed = corrupt_next_token_map(follow, 0.3, seed=4)
    shape = TargetShape(num_layers=4, hidden=64, heads=4, kv_heads=2, intermediate=96)
    model = make_bigram_target(tmp_path / "t", follow, shape)
    config = draft_config_dict(model.config, aux_ids=[-1, 1, 2])
    save_draft(tmp_path / "d", config, bigram_draft_tensors(model, config, believed))
    target = load_target(tmp_path / "t", device="cpu")
    draft, wiring = load_draft(tmp_path / "d", target)
    num_steps = 4

    def walk(mapping, token, times):
        for _ in range(times):
            token = mapping[token]
        return token

    prompt = [11, 30]
    records = list(replay(target, draft, prompt, wiring, ReplayConfig(num_steps, 120)))
    tokens = prompt + output_ids_of(records)
    steps = [r for r in records if isinstance(r, StepRecord)]
    assert output_ids_of(records) == plain_greedy(target, prompt, 120)
    for step in steps:
        previous = tokens[step.position - 1]
        expected = 0
        while expected < num_steps and walk(believed, previous, expected + 2) == walk(
            follow, previous, expected + 2
        ):
            expected += 1
        assert step.accepted_count == expected
    counts = {s.accepted_count for s in steps}
    assert 0 in counts and num_steps in counts and counts & {1, 2, 3}


def test_the_demo_pair_replays_exactly():
    """The bundled demo pair on two eval prompts equals plain greedy decoding: run in both the newest
    and the floor transformers environment of tests/run.sh."""
    import json

    from backend.defaults import DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET
    from backend.engine.loading import load_target
    from backend.engine.preflight import load_checked_draft
    from backend.engine.replay import ReplayConfig, output_ids_of, replay
    from tests.support.oracle import plain_greedy

    target = load_target(DEMO_TARGET, device="cpu", dtype="fp32")
    draft, report = load_checked_draft(DEMO_DRAFTS / "final", target)
    records = [json.loads(line) for line in DEMO_EVAL.read_text().splitlines()[:2]]
    for record in records:
        prompt = record["input_ids"][: record["n_prompt_tokens"]]
        output = output_ids_of(list(replay(target, draft, prompt, report.wiring, ReplayConfig(4, 64))))
        assert len(output) == 64 and output == plain_greedy(target, prompt, 64)
