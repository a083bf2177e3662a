"""Compare page: two demo drafts on one sample, in the background, stored as two runs."""

from __future__ import annotations

import pytest

from tests.support.pages import finish, frame_with, ok, page

pytestmark = pytest.mark.slow


def test_compare_two_drafts_on_a_sample(db):
    from backend.defaults import DEMO_DRAFTS
    from backend.service.runs import list_runs

    app = ok(page("3_Compare").run())
    app.number_input(key="compare_max_new").set_value(24).run()
    app.button(key="compare_start_one").click().run()
    app = ok(finish(app, "compare_task"))
    app.run()
    assert len(frame_with(app, "AL delta (B - A)")) == 1
    assert app.metric[1].value  # accept length B with its delta
    runs = list_runs(db)
    assert sorted(r.draft_path for r in runs) == [str(DEMO_DRAFTS / "epoch1"), str(DEMO_DRAFTS / "final")]
    assert all(r.status == "finished" and r.sample_ref == "dataset 1 #0" for r in runs)
