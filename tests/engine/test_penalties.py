"""Sampling penalties in the replay (issue 42, sampling-penalties): with a penalty on the target, the
replay's output is still the target's own penalised greedy output, token for token, whether the
draft mirrors the penalty or not; only the acceptance differs."""

from __future__ import annotations

import pytest

PROMPTS = [[1, 5, 9, 1, 5, 9], [2, 4, 6, 8, 10, 2, 4], [30, 30, 30]]
MAX_NEW = 40


def reference(target, prompt, max_new, repetition=1.0, frequency=0.0, presence=0.0):
    """Cache-free greedy with the penalties written out as vLLM's apply_penalties states them."""
    import torch

    tokens, out = list(prompt), []
    eos = set(target.eos_token_ids)
    with torch.inference_mode():
        for _ in range(max_new):
            row = target.model(input_ids=torch.tensor([tokens])).logits[0, -1].float().clone()
            for token in set(tokens):
                row[token] = row[token] / repetition if row[token] > 0 else row[token] * repetition
            for token in set(out):
                row[token] -= frequency * out.count(token) + presence
            nxt = int(row.argmax())
            tokens.append(nxt)
            out.append(nxt)
            if nxt in eos:
                break
    return out


def run(pair, prompt, penalties, k=3):
    from backend.engine.replay import ReplayConfig, output_ids_of, replay
    from backend.run.records import StepRecord

    records = list(
        replay(pair.target, pair.draft, prompt, pair.wiring, ReplayConfig(k, MAX_NEW, penalties=penalties))
    )
    steps = [r for r in records if isinstance(r, StepRecord)]
    return output_ids_of(records), sum(s.accepted_count for s in steps) / len(steps)


@pytest.mark.parametrize("name", ["copy-L4-bigram", "random-L2"])
def test_a_penalised_replay_equals_the_targets_penalised_greedy_output(pairs, name):
    import torch

    from backend.engine.penalties import Penalties

    pair = pairs[name]
    for prompt in PROMPTS:
        hf = pair.target.model.generate(
            torch.tensor([prompt]),
            max_new_tokens=MAX_NEW,
            do_sample=False,
            pad_token_id=0,
            repetition_penalty=1.5,
        )[0, len(prompt) :].tolist()
        assert reference(pair.target, prompt, MAX_NEW, repetition=1.5) == hf  # the reference is transformers'
        for on_draft in (False, True):
            output, _ = run(pair, prompt, Penalties(repetition=1.5, on_draft=on_draft))
            assert output == hf, (name, prompt, on_draft)
        mixed = Penalties(repetition=1.2, frequency=0.7, presence=0.4)
        expected = reference(pair.target, prompt, MAX_NEW, 1.2, 0.7, 0.4)
        assert run(pair, prompt, mixed)[0] == expected


def test_the_penalty_costs_the_trained_draft_acceptance_unless_it_mirrors_it():
    """The bundled demo's trained `final` draft: a repetition penalty on the target only lowers its
    accept length; a draft that mirrors the penalty gets part of it back."""
    from types import SimpleNamespace

    from backend.data.samples import read_jsonl
    from backend.defaults import DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET
    from backend.drafts.readings import reading_of
    from backend.engine.penalties import Penalties
    from backend.service import models

    target, draft, _ = models.pair(str(DEMO_TARGET), str(DEMO_DRAFTS / "final"))
    view, _ = reading_of("auto", None, draft, target.num_layers)
    pair = SimpleNamespace(target=target, draft=draft, wiring=view.wiring)
    samples, _ = read_jsonl(DEMO_EVAL, 2048)
    prompts = [list(s.input_ids[: s.prompt_len]) for s in samples[:3]]
    mean = lambda penalties: sum(run(pair, p, penalties, k=4)[1] for p in prompts) / len(prompts)  # noqa: E731
    plain, target_only = mean(Penalties()), mean(Penalties(repetition=1.3))
    mirrored = mean(Penalties(repetition=1.3, on_draft=True))
    models.forget()
    assert target_only < mirrored < plain, (target_only, mirrored, plain)


def test_penalties_are_checked_and_refused_off_the_chain():
    from backend.engine.penalties import Penalties
    from backend.engine.replay import ReplayConfig
    from backend.engine.sampling import Sampling

    with pytest.raises(ValueError, match="repetition_penalty must be > 0"):
        Penalties(repetition=0)
    with pytest.raises(ValueError, match="frequency_penalty"):
        Penalties(frequency=3)
    with pytest.raises(ValueError, match="greedy chain only"):
        ReplayConfig(3, 8, penalties=Penalties(repetition=1.1), sampling=Sampling(temperature=0.7))
    assert Penalties(repetition=1.1, on_draft=True).label == "repetition_penalty=1.1 on target and draft"
