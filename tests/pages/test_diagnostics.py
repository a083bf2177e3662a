"""Diagnostics page: the serving-flag lint of the seed story's flags runs inline."""

from __future__ import annotations

import pytest

from tests.support.pages import ok, page

pytestmark = pytest.mark.slow


def test_lint_flags_the_seed_story(db):
    diagnostics = ok(page("4_Diagnostics").run())
    ok(diagnostics.button(key="lint_run").click().run())
    found = " ".join(e.value for e in diagnostics.error)
    assert "topk1-draft-tokens-reset" in found and "eagle-algorithm-eagle3-draft" in found


def test_server_vs_replay_tab_reads_a_pasted_log_and_refuses_garbage(db):
    from pathlib import Path

    log = (Path(__file__).resolve().parent.parent / "support" / "serving" / "sglang_0.5.12.log").read_text()
    diagnostics = ok(page("4_Diagnostics").run())
    diagnostics.text_area(key="server_text").set_value(log).run()
    ok(diagnostics.button(key="server_compare").click().run())
    shown = {m.label: m.value for m in diagnostics.metric}
    assert shown["Server accept length"] == "1.90" and "Replay accept length (K=1)" in shown
    assert any("single-draft-step" in w.value for w in diagnostics.warning)
    diagnostics.text_area(key="server_text").set_value("nothing here").run()
    ok(diagnostics.button(key="server_compare").click().run())
    assert "no SGLang line" in diagnostics.error[0].value
