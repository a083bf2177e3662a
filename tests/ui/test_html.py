"""Token HTML blocks: every token string escaped, one block per window, statuses and classes right."""

from __future__ import annotations

from backend.diagnostics.mismatch import ChunkRow
from backend.run.records import StepRecord, StepTree
from ui.html import chips_html, context_html, legend, mismatch_html, output_html, sample_html, step_statuses

HOSTILE = {1: "<script>alert(1)</script>", 2: "<img src=x onerror=alert(1)>", 3: '"quoted" & more', 4: "ok"}


def piece(token: int) -> str:
    return HOSTILE.get(token, f"t{token}")


def step(position=3, drafted=(1, 2, 3), accepted=1, bonus=4):
    return StepRecord(
        step_index=0,
        position=position,
        pending_token=4,
        drafted_ids=list(drafted),
        accepted_count=accepted,
        bonus_id=bonus,
        committed_ids=list(drafted[:accepted]) + [bonus],
        target_argmax_ids=[1, 4, 4, 4],
        target_argmax_probs=[0.9, 0.8, 0.7, 0.6],
        draft_probs=[0.5, 0.4, 0.3],
        draft_top_ids=[[1, 2], [2, 3], [3, 4]],
        draft_top_probs=[[0.5, 0.2], [0.4, 0.1], [0.3, 0.2]],
    )


def test_every_token_string_is_escaped():
    blocks = [
        sample_html([1, 2, 3], [0, 1, 1], 1, [piece(t) for t in (1, 2, 3)]),
        chips_html(step(), piece),
        output_html(4, [step()], piece, 0),
        mismatch_html([1, 2], [ChunkRow(0, "<c>", cosine=0.5, norm_ratio=1.0, relative_error=0.1)], piece),
    ]
    for html in blocks:
        assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in blocks[0]
    assert "&lt;img src=x onerror=alert(1)&gt;" in blocks[0]
    assert 'title="#2  id 3' in blocks[0] and "&quot;" in blocks[0]  # attribute quotes escaped too


def test_statuses_and_classes():
    assert step_statuses([1, 2, 3], 1) == ["accepted", "rejected", "not reached"]
    assert step_statuses([1, 2, 3], 3) == ["accepted"] * 3
    chips = chips_html(step(), piece)
    assert (
        chips.count("sl-chip ") == 4
        and "sl-rej" in chips
        and "sl-nr" in chips
        and "bonus (target row 1)" in chips
    )
    sample = sample_html([1, 2, 3], [0, 1, 1], 1, ["a", "b", "c"])
    assert sample.index("sl-prompt") < sample.index("response &#8594;") < sample.index("sl-resp")


def test_output_window_stays_one_small_block():
    steps = [step(position=3 + 2 * i, drafted=(5, 6, 7), accepted=1, bonus=8) for i in range(1000)]
    html = output_html(9, steps, piece, current=500, window=30)
    assert html.count('class="sl-step') == 61 and html.count("sl-cur") == 1
    assert "470 earlier steps" in html and "469 later steps" in html


def test_context_window_and_legend():
    html = context_html(list(range(100)), piece, limit=60)
    assert html.count("sl-prompt") == 60 and "… 40 earlier" in html
    assert all(cls in legend() for cls in ("sl-acc", "sl-rej", "sl-nr", "sl-bonus"))


def test_markdown_escaping_leaves_user_strings_inert():
    from ui.html import md

    hostile = "a` [phish](https://evil.example/login) `b *x* $y$ <b>z</b>"
    escaped = md(hostile)
    assert "[phish]" not in escaped and "\\[phish\\]" in escaped
    assert "`" not in escaped.replace("\\`", "") and "\\*x\\*" in escaped and "\\$y\\$" in escaped
    assert "<b>" not in escaped.replace("\\<b\\>", "")


def test_a_sampled_rejection_shows_the_draw_and_the_rule_not_the_argmax():
    """Sampled chains: draft d2 is the target's argmax and still rejected by its draw; the chip says so."""
    from ui.html import sampled_decision

    sampled = step(drafted=(1, 4, 3), accepted=1)
    sampled.tree = StepTree(
        tokens=[1, 4, 3],
        parents=[-1, 0, 1],
        draft_probs=[0.5, 0.4, 0.3],
        accept_probs=[0.9, 0.35, 0.2],
        draws=[0.12, 0.71, None],
        decisions=["accepted", "rejected", "unreached"],
    )
    said = sampled_decision(sampled, 1)
    assert "accept prob p=0.350" in said and "draw u=0.710" in said and "rejected (u > p)" in said
    assert "accepted (u <= p)" in sampled_decision(sampled, 0)
    assert "no draw" in sampled_decision(sampled, 2)
    html = chips_html(sampled, piece)
    assert "target argmax: ok" in html and "draw u=0.710" in html
    assert sampled_decision(step(), 1) is None  # greedy: the argmax is the rule


def test_chips_show_whitespace_as_the_top_5_list_does():
    """Issue 43 row 10: a chip of a leading-space or newline piece shows it, as its alternatives do."""
    from types import SimpleNamespace

    from ui.html import chips_html

    pieces = {1: " def", 2: "\n", 3: "x"}
    step = SimpleNamespace(
        drafted_ids=[1, 2],
        accepted_count=1,
        draft_probs=[0.9, 0.5],
        draft_top_ids=[[1, 3], [2, 3]],
        draft_top_probs=[[0.9, 0.1], [0.5, 0.5]],
        target_argmax_ids=[1, 3, 3],
        target_argmax_probs=[0.8, 0.7, 0.6],
        bonus_id=3,
        tree=None,
        sampled=None,
    )
    html = chips_html(step, pieces.get)
    assert "<b>\u2423def</b>" in html and "<b>\\n</b>" in html
    assert "\u2423def 0.90" in html  # the alternatives list writes it the same way
