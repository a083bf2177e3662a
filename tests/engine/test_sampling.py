"""Sampled replays: the tokens they emit follow the target's own sampling distribution (a
chi-square test over a fixed seed set), the recorded expected acceptance matches the realised one,
and a seed replays bit for bit."""

from __future__ import annotations

import pytest

# (steps, topk, draft tokens, rule): a chain under each engine's rule and an SGLang tree.
MODES = [(3, 1, 4, "sglang"), (3, 1, 4, "vllm"), (3, 4, 8, "sglang")]
SAMPLING = dict(temperature=0.8, top_k=4)
PROMPT = [1, 5, 9]
CHI2_CRITICAL_DF15_P001 = 37.70  # chi-square critical value, 15 degrees of freedom, p = 0.001


def _config(mode, seed, max_new, record=False):
    from backend.engine.replay import ReplayConfig
    from backend.engine.sampling import Sampling

    steps, topk, tokens, rule = mode
    return ReplayConfig(
        steps,
        max_new,
        record=record,
        topk=topk,
        num_draft_tokens=tokens,
        sampling=Sampling(seed=seed, rule=rule, **SAMPLING),
    )


def _joint_reference(pair) -> dict[tuple[int, int], float]:
    """P(t1, t2) = p(t1 | prompt) p(t2 | prompt, t1) under the target's sampling distribution."""
    import torch

    from backend.engine.sampling import Sampling, target_distribution

    sampling = Sampling(**SAMPLING)
    model = pair.target.model
    with torch.inference_mode():
        first = target_distribution(model(input_ids=torch.tensor([PROMPT])).logits[0, -1:], sampling)[0]
        joint = {}
        for t1 in first.nonzero().flatten().tolist():
            second = target_distribution(
                model(input_ids=torch.tensor([PROMPT + [t1]])).logits[0, -1:], sampling
            )[0]
            for t2 in second.nonzero().flatten().tolist():
                joint[t1, t2] = float(first[t1] * second[t2])
    return joint


SEEDS = 640  # the chi-square test's sample: 40 draws a cell on average over the 16 cells


@pytest.fixture(scope="module", params=MODES, ids=lambda m: f"S{m[0]}-k{m[1]}-N{m[2]}-{m[3]}")
def first_steps(request, pairs) -> dict:
    """One sampled replay per seed, stopped after its first verify step (computed once per mode, read by
    both statistical tests below): the first two emitted tokens, and that step's record. The first step
    always verifies in full (1 + K + 1 tokens fit the budget), so no truncation biases its count."""
    from backend.engine.replay import replay
    from backend.run.records import PrefillRecord, StepRecord

    mode = request.param
    pair = pairs["copy-L4-bigram"]  # a draft that is often right, so acceptance and rejection both happen
    budget = 1 + mode[0] + 1
    firsts, steps = [], []
    for seed in range(SEEDS):
        records = replay(pair.target, pair.draft, PROMPT, pair.wiring, _config(mode, seed, budget))
        prefill = next(r for r in records if isinstance(r, PrefillRecord))
        step = next(r for r in records if isinstance(r, StepRecord))
        records.close()  # the rest of the replay is not run
        firsts.append((prefill.first_token, step.committed_ids[0]))
        steps.append(step)
    return {"pair": pair, "firsts": firsts, "steps": steps, "num_steps": mode[0]}


@pytest.mark.slow
def test_the_first_emitted_tokens_follow_the_targets_sampling_distribution(first_steps):
    joint = _joint_reference(first_steps["pair"])
    assert len(joint) == 16
    counts = dict.fromkeys(joint, 0)
    for t1, t2 in first_steps["firsts"]:
        counts[t1, t2] += 1
    chi2 = sum((counts[cell] - SEEDS * p) ** 2 / (SEEDS * p) for cell, p in joint.items())
    assert chi2 < CHI2_CRITICAL_DF15_P001, (chi2, counts)
    accepted_first = sum(step.accepted_count > 0 for step in first_steps["steps"])
    assert 0.1 * SEEDS < accepted_first < 0.95 * SEEDS  # both paths of the rule were exercised


@pytest.mark.slow
def test_the_recorded_expected_acceptance_matches_the_realised_one(first_steps):
    differences = []  # realised - expected accepted count, per (whole) first step
    for step in first_steps["steps"]:
        assert len(step.committed_ids) == step.accepted_count + 1 <= first_steps["num_steps"] + 1
        differences.append(step.accepted_count - step.tree.expected_accepted)
        tree = step.tree
        for node, decision in enumerate(tree.decisions):
            if decision != "unreached":
                assert tree.draws[node] is not None
            assert 0.0 <= tree.accept_probs[node] <= 1.0
    # E[realised - expected] = 0 per step: the mean difference is within 4 standard errors of 0.
    mean = sum(differences) / len(differences)
    spread = (sum((d - mean) ** 2 for d in differences) / (len(differences) - 1)) ** 0.5
    assert abs(mean) < 4 * spread / len(differences) ** 0.5, (mean, spread, len(differences))


def test_a_seed_replays_bit_for_bit_and_another_seed_differs(pairs):
    from backend.engine.replay import replay

    pair = pairs["copy-L4-bigram"]

    def run(seed):
        records = list(
            replay(pair.target, pair.draft, PROMPT, pair.wiring, _config(MODES[2], seed, 24, record=True))
        )
        return [(r.tree, r.committed_ids) for r in records[1:]], records[0].first_token

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_top_k_one_is_greedy_as_in_sglang(pairs):
    from backend.engine.replay import ReplayConfig, output_ids_of, replay
    from backend.engine.sampling import Sampling
    from tests.support.oracle import plain_greedy

    pair = pairs["random-L2"]
    config = ReplayConfig(
        3, 16, topk=2, num_draft_tokens=5, sampling=Sampling(temperature=0.9, top_k=1, seed=5)
    )
    records = list(replay(pair.target, pair.draft, PROMPT, pair.wiring, config))
    assert output_ids_of(records) == plain_greedy(pair.target, PROMPT, 16)


def test_vllm_verifies_chains_only(pairs):
    from backend.engine.replay import ReplayConfig, replay
    from backend.engine.sampling import Sampling

    pair = pairs["random-L2"]
    config = ReplayConfig(3, 8, topk=2, num_draft_tokens=5, sampling=Sampling(temperature=0.9, rule="vllm"))
    with pytest.raises(ValueError, match="chains only"):
        list(replay(pair.target, pair.draft, PROMPT, pair.wiring, config))


def test_target_distribution_keeps_top_k_then_top_p():
    import torch

    from backend.engine.sampling import Sampling, target_distribution

    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    probs = target_distribution(logits, Sampling(temperature=1.0, top_k=4, top_p=0.7))[0]
    # top-4 renormalised: .5/.95, .2/.95, .15/.95, .1/.95; top-p 0.7 keeps .526 and .211 (.737 >= .7)
    assert probs.nonzero().flatten().tolist() == [0, 1]
    assert torch.allclose(probs[:2], torch.tensor([0.5, 0.2]) / 0.7)
    greedy = target_distribution(logits, Sampling())[0]
    assert greedy.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_sibling_accept_probability_is_the_target_mass_with_default_thresholds():
    from backend.engine.sampling import Sampling, sibling_accept_probability

    probs = [0.3, 0.2, 0.1]
    default = Sampling(temperature=1.0)
    assert [sibling_accept_probability(probs, i, default) for i in range(3)] == pytest.approx(probs)
    loose = Sampling(temperature=1.0, threshold_acc=0.5)  # coin <= prob_acc / 0.5
    assert [sibling_accept_probability(probs, i, loose) for i in range(3)] == pytest.approx([0.6, 0.4, 0.0])
