"""The demo's repetition measure and the unlikelihood stage's choice of tokens to push down."""

from __future__ import annotations

import pytest

from demo.repetition import mean_share, repeated_ngram_share


def test_a_loop_scores_near_one_and_fresh_text_zero():
    assert repeated_ngram_share(list(range(40))) == 0.0
    loop = [7, 8, 9] * 20  # "kw_dir, kw_dir, kw_dir, ..."
    assert repeated_ngram_share(loop) == pytest.approx((len(loop) - 3 - 3) / (len(loop) - 3))
    assert repeated_ngram_share([1, 2, 3]) == 0.0  # shorter than one 4-gram
    assert repeated_ngram_share([1, 2, 3, 4, 1, 2, 3, 4]) == pytest.approx(1 / 5)


def test_mean_share_skips_sequences_too_short_to_measure():
    assert mean_share([[1, 2], [1, 2, 3, 4, 1, 2, 3, 4]]) == pytest.approx(1 / 5)
    assert mean_share([]) == 0.0


def test_repeated_positions_mark_every_token_of_a_repeat_after_the_prompt():
    from demo.train_target import repeated_positions  # imports torch: not at collection

    ids = [1, 2, 3, 4, 5, 1, 2, 3, 4, 6]
    assert repeated_positions(ids, start=0) == [5, 6, 7, 8]
    assert repeated_positions(ids, start=7) == [7, 8]  # the prompt's tokens are never pushed down
    assert repeated_positions([1, 2, 3, 4, 5, 6], start=0) == []
