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
    from backend.diagnostics.probe_settings import Candidate, ProbeResult
    from ui.diagnostics.probe import candidate_table

    why = "embedding, low, middle (the shift in docs/seed-story.md)"  # shown as "embedding, low, middl…"
    report = ProbeResult(candidates=[Candidate((2, 4, 5), "declared"), Candidate((0, 2, 4), why)])
    table, columns = candidate_table(report)
    assert table["why tried"].tolist() == ["declared", why]
    width = columns["why tried"]["width"]
    assert width >= 7 * len(why)  # the whole reason (about 7 px a character)
    # and the whole table fits beside the sidebar at 1440 px (the page's main column is about 950 px)
    assert sum(column["width"] for column in columns.values()) <= 950
    assert candidate_table(ProbeResult())[1]["why tried"]["width"] > 0  # no candidate: still a width


def test_the_what_if_opens_on_the_largest_run_of_the_active_draft():
    """Issue 65 row 8: it opened on the newest run (a 16-token typed prompt, 8 verify steps) and chose K from
    it without a word on its size; it opens on the sidebar draft's run with the most verify steps."""
    from types import SimpleNamespace

    from ui.diagnostics.whatif import FEW_STEPS, _largest

    def chain(run_id, draft, steps):
        return SimpleNamespace(
            id=run_id, draft_path=draft, measured=SimpleNamespace(accept_histogram=[0, steps])
        )

    runs = [chain(9, "drafts/final", 8), chain(5, "drafts/final", 120), chain(7, "drafts/epoch1", 400)]
    assert _largest(runs, "drafts/final").id == 5  # the newest (9) is small; epoch1's is not the draft's
    assert _largest(runs, "drafts/other").id == 7  # no run of the draft: the largest of any
    assert FEW_STEPS > 8


def test_the_doctor_does_not_say_wiring_pass_under_a_probe_that_rejects_it():
    """Issue 65 row 12: the doctor's table said "wiring: pass" under its own red line that the kept probe
    rejects the declared wiring (preflight's check only says the declared indices exist)."""
    from types import SimpleNamespace

    from ui.diagnostics.doctor import checks_shown

    def check(name, status, message):
        return SimpleNamespace(to_dict=lambda: {"name": name, "status": status, "message": message})

    checks = [check("wiring", "pass", "aux HF indices [2, 15, 27] from ..."), check("vocab", "pass", "ok")]
    assert [r["status"] for r in checks_shown(checks, None)] == ["pass", "pass"]
    wiring, vocab = checks_shown(checks, [0, 2, 15])
    assert (
        wiring["status"] == "rejected by the kept probe" and "trained on HF [0, 2, 15]" in wiring["message"]
    )
    assert vocab["status"] == "pass"
