"""Diagnostics tables in plain words: the what-if's headers and the probe's reasons shown whole
(issue 58 row 14). Plain function tests: the tables are built without a page."""

from __future__ import annotations


def test_the_whatif_table_has_plain_headers():
    from backend.diagnostics.whatif import WhatIfRow
    from ui.diagnostics.whatif import whatif_table

    table = whatif_table([WhatIfRow(1, 1.8, 1.4, False), WhatIfRow(5, 2.9, 1.7, True)])
    assert list(table.columns) == [
        "K (draft tokens per step)",
        "predicted accept length",
        "predicted speed-up",
        "extrapolated",
    ]
    assert table["K (draft tokens per step)"].tolist() == [1, 5]
    assert table["predicted speed-up"].tolist() == [1.4, 1.7]
    assert list(whatif_table([]).columns) == list(table.columns)  # no row: the headers still read


def test_the_probe_s_reasons_are_not_cut_at_the_column_edge():
    from backend.diagnostics.probe_settings import CandidateResult, ProbeResult
    from ui.diagnostics.probe import candidate_table

    why = "embedding, low, middle (the shift in docs/seed-story.md)"  # shown as "embedding, low, middl…"
    report = ProbeResult(candidates=[CandidateResult([2, 4, 5], "declared"), CandidateResult([0, 2, 4], why)])
    table, columns = candidate_table(report)
    assert table["why tried"].tolist() == ["declared", why]
    width = columns["why tried"]["width"]
    assert width >= 7 * len(why)  # the whole reason (about 7 px a character)
    # and the whole table fits beside the sidebar at 1440 px (the page's main column is about 950 px)
    assert sum(column["width"] for column in columns.values()) <= 950
    assert candidate_table(ProbeResult())[1]["why tried"]["width"] > 0  # no candidate: still a width
