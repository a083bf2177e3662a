"""Aligning two runs by output position: what each run committed where, and the first position
where the drafts proposed different tokens."""

from __future__ import annotations

from backend.service.tasks import CompareRow
from tests.ui.test_html import step
from ui.compare.timeline import committed_positions, first_divergence, timeline_html


class Run:
    prompt_ids = [1, 2, 3]
    output_ids = [9, 1, 4, 1, 4]


def test_alignment_and_first_divergence():
    a = [
        step(position=3, drafted=(1, 2), accepted=1, bonus=4),
        step(position=5, drafted=(1, 4), accepted=1, bonus=4),
    ]
    b = [
        step(position=3, drafted=(1, 4), accepted=2, bonus=1),
        step(position=6, drafted=(9, 9), accepted=0, bonus=4),
    ]
    positions_a, positions_b = committed_positions(Run, a), committed_positions(Run, b)
    assert positions_a[3].kind == "prefill"
    assert positions_a[4].kind == "accepted" and positions_a[5].kind == "bonus"
    assert positions_b[5].kind == "accepted" and positions_b[6].kind == "bonus"
    assert (positions_a[5].proposal, positions_a[5].proposal_accepted) == (2, False)
    assert first_divergence(positions_a, positions_b) == 5  # A proposed 2 there, B proposed 4
    assert first_divergence(positions_a, positions_a) is None


def test_timeline_is_one_escaped_block_with_the_divergence_outlined():
    positions = committed_positions(Run, [step(position=3, drafted=(1, 2), accepted=1, bonus=4)])
    html = timeline_html(Run, positions, lambda t: "<b>" if t == 1 else f"t{t}", 0, 100, divergence=4)
    assert html.startswith('<div class="sl-text">') and html.count("<div") == 1
    assert "<b>" not in html and "&lt;b&gt;" in html
    assert html.count("sl-cur") == 1 and html.count("sl-t ") == 3  # positions 3 (prefill), 4, 5


def row(al_a: float | None, al_b: float | None) -> CompareRow:
    """A comparison's row with these accept lengths (runs 1 and 2)."""
    return CompareRow(0, "unit", 1, al_a, 2, al_b, (al_b or 0) - (al_a or 0))


def test_the_batch_says_in_words_which_draft_is_better():
    from ui.compare.batch import batch_sentence, batch_summary

    rows = [row(1.5, 2.5), row(2.0, 1.9), row(1.0, 3.0)]
    rows += [row(1.2, 2.4), row(1.1, 2.0), row(1.3, 2.2)]
    said = batch_sentence(batch_summary(rows), "miswired", "final")
    assert said.startswith("final (B) is better on these 6 samples: mean accept length 2.33 vs 1.35")
    assert "(B - A +0.98, 95% interval [+0.28, +1.69])" in said  # one sign convention: B - A
    assert "higher on 5 of 6 samples, lower on 1." in said
    one = batch_sentence(
        batch_summary(rows[:1]), "miswired", "final"
    )  # one sample: no winner (issue 65 row 13)
    assert one.startswith("final (B) is higher on this one sample: accept length 2.50 vs 1.50 (B - A +1.00).")
    assert "One sample settles nothing" in one and "better" not in one
    flipped = batch_sentence(batch_summary([row(2.53, 1.23)]), "final", "miswired")
    assert "(B - A -1.30)" in flipped  # as the Mean delta (B - A) metric beside it shows it
    assert "equally" in batch_sentence(batch_summary([row(2.0, 2.0)]), "a", "b")


def test_the_batch_says_when_a_difference_is_within_the_spread():
    """Issue 42: accept length varies about +-50% between prompts; a mean delta whose 95% interval over
    samples includes 0 is not called a win."""
    from ui.compare.batch import batch_sentence, batch_summary

    rows = [row(1.5, 2.5), row(2.0, 1.9), row(1.0, 3.0)]
    said = batch_sentence(batch_summary(rows), "miswired", "final")
    assert said.startswith("final (B) is higher on 2 of 3 samples (lower on 1), but 3 samples cannot settle")
    assert "[-1.64, +3.58], which includes 0" in said
    # issue 58 row 13: 3 of 3 wins and still inside the spread: the wins said, and the N that would settle it
    wins = [row(1.5, 2.6), row(2.0, 2.1), row(1.0, 1.3)]
    summary = batch_summary(wins)
    said = batch_sentence(summary, "miswired", "final")
    assert said.startswith("final (B) is higher on 3 of 3 samples (lower on 0), but 3 samples cannot settle")
    assert (
        f"About {summary.samples_to_settle()} samples would settle" in said
        and summary.samples_to_settle() > 3
    )


def test_the_samples_that_would_settle_a_delta_are_the_t_interval_s():
    """Issue 58 row 13: the N said is the fewest whose t interval (the one the sentence quotes)
    excludes 0 if the mean delta and its spread hold; (2 sd / delta)^2 said 4 at sd 1.02, delta 1.06,
    where 4 samples' interval still includes 0."""
    from backend.run.metrics import t975
    from ui.compare.batch import BatchSummary

    def settle(delta: float, sd: float, samples: int = 3) -> int:
        return BatchSummary(samples, 1.0, 1.0 + delta, delta, None, 2, 1, 0, 0, sd).samples_to_settle()

    assert settle(1.06, 1.02) == 7
    for delta, sd in ((1.06, 1.02), (-0.3, 1.0), (0.05, 1.0), (0.5, 0.4)):
        n = settle(delta, sd)
        assert abs(delta) - t975(n - 1) * sd / n**0.5 >= 0  # n samples: the interval excludes 0
        assert n == 4 or abs(delta) - t975(n - 2) * sd / (n - 1) ** 0.5 < 0  # one fewer: it does not
    assert settle(0.05, 1.0) == 1537  # past the table: the normal's 1.960
    assert BatchSummary(3, 1.0, 1.0, 0.0, None, 0, 0, 3, 0, 0.0).samples_to_settle() is None


def test_the_sides_are_named_with_their_settings_only_when_these_differ():
    from ui.compare.batch import side_names

    drafts = {"A": "/d/final", "B": "/d/dflash"}
    same = {"A": "final K=4", "B": "dflash K=4"}
    assert side_names(drafts, same) == ("final", "dflash")
    differ = {"A": "final K=4", "B": "dflash K=7"}
    assert side_names(drafts, differ) == ("final (K=4)", "dflash (K=7)")
    tree = {"A": "final K=4", "B": "final K=4 topk=4 N=8"}
    assert side_names({"A": "/d/final", "B": "/d/final"}, tree) == ("final (K=4)", "final (K=4 topk=4 N=8)")
    assert side_names(drafts, {}) == ("final", "dflash")  # a result kept before sides had settings
