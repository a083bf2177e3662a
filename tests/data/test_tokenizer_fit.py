"""A dataset made with another tokenizer is flagged (issue 40): ids past the vocabulary, ids that use only
the bottom of a much larger one, another tokenizer's BOS, and a round trip through this tokenizer that
does not give the ids back. The bundled toy's own eval set reads clean with its own tokenizer."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from backend.data.samples import read_jsonl
from backend.data.tokenizer_fit import tokenizer_fit
from backend.defaults import DEMO_EVAL, DEMO_TARGET, REAL


@dataclass
class Ids:
    input_ids: list[int]


@pytest.fixture(scope="module")
def toy():
    from backend.engine.loading import load_tokenizer

    return load_tokenizer(DEMO_TARGET)


@pytest.fixture(scope="module")
def toy_eval():
    samples, rejected = read_jsonl(DEMO_EVAL, None)
    assert not rejected
    return samples


def test_a_dataset_made_by_this_tokenizer_fits(toy, toy_eval):
    fit = tokenizer_fit(toy_eval, toy, 2048)
    assert fit.fits and fit.flags == []
    assert fit.round_trip is not None and fit.round_trip > 0.9 and fit.samples_read == 16


def test_ids_past_the_vocabulary_are_flagged(toy):
    fit = tokenizer_fit([Ids([5, 9, 48304, 12])] * 4, toy, 2048)
    assert not fit.fits and "48304, past the target's vocabulary of 2,048" in fit.flags[0]


def test_another_tokenizer_s_ids_do_not_round_trip(toy, toy_eval):
    """The same text under another id assignment (a shuffled vocabulary): every id is in range, but
    decoding with this tokenizer and encoding again does not give them back."""
    shuffled = list(range(2048))
    random.Random(0).shuffle(shuffled)
    foreign = [Ids([shuffled[i] for i in s.input_ids]) for s in toy_eval]
    fit = tokenizer_fit(foreign, toy, 2048)
    assert fit.round_trip is not None and fit.round_trip < 0.95 and fit.exact_round_trips == 0
    assert any("made by another tokenizer" in f for f in fit.flags)


def test_ids_that_use_only_the_bottom_of_a_large_vocabulary_are_flagged(toy_eval):
    """The toy's ids (a 2,048-token tokenizer) read against a 49,152-token vocabulary."""
    fit = tokenizer_fit(toy_eval, None, 49152)
    assert any("span only 0..2046 of the target's 49,152-token vocabulary" in f for f in fit.flags)
    assert tokenizer_fit(toy_eval[:2], None, 49152).fits  # too few tokens to say


def test_another_tokenizer_s_bos_is_flagged_and_a_shared_opening_phrase_is_not(toy, toy_eval):
    foreign_bos = 777
    assert foreign_bos not in toy.all_special_ids
    opened = [Ids([foreign_bos, *s.input_ids]) for s in toy_eval]
    assert any("open with id 777" in f for f in tokenizer_fit(opened, toy, 2048).flags)
    phrase = toy("Complete the function", add_special_tokens=False)["input_ids"]
    same_start = [Ids([*phrase, *s.input_ids]) for s in toy_eval]  # HumanEval's raw prompts all do
    assert not any("open with" in f for f in tokenizer_fit(same_start, toy, 2048).flags)


@pytest.mark.skipif(not REAL.ready(), reason="the SmolLM2 pair is not set up (python -m demo.smollm2)")
def test_the_toy_s_eval_set_is_flagged_under_smollm2_and_its_own_is_not(toy_eval):
    from backend.engine.loading import load_tokenizer

    smollm2 = load_tokenizer(REAL.target)
    assert not tokenizer_fit(toy_eval, smollm2, 49152).fits  # the gibberish the issue saw, named
    own, _ = read_jsonl(REAL.eval_set, None)
    raw, _ = read_jsonl(REAL.eval_sets[1][1], None)
    assert tokenizer_fit(own, smollm2, 49152).fits and tokenizer_fit(raw, smollm2, 49152).fits
