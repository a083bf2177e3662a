"""Samples page: the demo dataset's table, filters, import by path (a bad line reported, an empty
file refused)."""

from __future__ import annotations

import json

import pytest

from tests.support.pages import frame_with, ok, page

pytestmark = pytest.mark.slow


def test_samples_filters_view_and_import(db, tmp_path):
    from backend.service.datasets import list_datasets

    app = ok(page("1_Samples").run())
    bundled = len(list_datasets(db))
    total = len(frame_with(app, "loss-mask coverage"))
    sources = app.multiselect(key="samples_filter_source_1").options
    app.multiselect(key="samples_filter_source_1").set_value(sources[:1]).run()
    assert 0 < len(frame_with(app, "loss-mask coverage")) < total
    app.text_input(key="samples_filter_text_1").set_value("zzzz-not-there").run()
    assert any(c.value.startswith("0 of") for c in app.caption)
    app.text_input(key="samples_filter_text_1").set_value("").run()
    bad = tmp_path / "mixed.jsonl"
    bad.write_text(
        json.dumps({"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1], "source": "<b>x</b>"}) + "\n{oops\n"
    )
    app.radio(key="samples_source").set_value("Path on this machine").run()
    app.text_input(key="samples_path").set_value(str(bad)).run()
    ok(app.button(key="samples_import_path").click().run())
    assert (
        "imported 1 sample (format: jsonl), rejected 1" in app.warning[0].value
    )  # not green: a record was rejected
    assert frame_with(app, "reason")["line"].tolist() == [2]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("{oops\n")
    app.text_input(key="samples_path").set_value(str(empty)).run()
    ok(app.button(key="samples_import_path").click().run())
    assert "Nothing imported" in app.error[0].value
    assert (
        len(list_datasets(db)) == bundled + 1
    )  # the bundled eval sets and the mixed file; not the empty one
