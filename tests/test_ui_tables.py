"""Evidence tables and collapsed titles (issue 43 row 12): compact rows, titles cut at a word."""

from __future__ import annotations


def test_evidence_becomes_one_row_per_field_with_compact_values():
    from ui.tables import evidence_rows

    rows = evidence_rows(
        {
            "live_accept_length": 1.2345678,
            "acc_step0": {"declared": 0.1, "best": 0.59},
            "tied": [[0, 1, 6], [0, 2, 6]],
            "curve": [{"prompt_tokens": 256, "accept_length": 2.0}],
            "separated": False,
        }
    )
    assert {"field": "live accept length", "value": "1.235"} in rows
    assert {"field": "acc step0.best", "value": "0.59"} in rows
    assert {"field": "tied", "value": "[[0, 1, 6], [0, 2, 6]]"} in rows
    assert {"field": "curve", "value": "[{prompt_tokens: 256, accept_length: 2}]"} in rows
    assert {"field": "separated", "value": "False"} in rows


def test_titles_end_at_a_word_with_an_ellipsis():
    from ui.tables import title

    text = (
        "the draft was trained on HF [0, 1, 6] or HF [0, 2, 6], not on the declared HF [2, 6, 9]: acc_0 0.59"
    )
    assert title(text) == text
    short = title(text, 40)
    assert short.endswith("…") and len(short) <= 41 and text.startswith(short[:-1])
    assert short[:-1].split()[-1] in text.split()  # no word cut in half
