"""Issue 58 row 7: Decode's "Draft to replay" follows the sidebar's draft while the form is open, and
keeps a draft picked in the form until the sidebar changes (a fast page test: nothing replays)."""

from __future__ import annotations

import pytest

from tests.support.pages import ok, page

pytestmark = pytest.mark.slow


def test_the_form_s_draft_follows_the_sidebar_until_picked_in_the_form(db):
    app = ok(page("2_Decode").run())
    sidebar, form = app.sidebar.selectbox(key="sidebar_draft"), app.selectbox(key="decode_draft")
    first = sidebar.value
    assert form.value == first
    other = next(name for name in sidebar.options if name != first)
    app = ok(sidebar.set_value(other).run())
    assert app.selectbox(key="decode_draft").value == other  # followed the sidebar
    third = next(n for n in app.selectbox(key="decode_draft").options if n not in (other, first))
    app = ok(app.selectbox(key="decode_draft").set_value(third).run())
    app = ok(app.run())
    assert app.selectbox(key="decode_draft").value == third  # picked in the form: kept
    assert app.sidebar.selectbox(key="sidebar_draft").value == other
    app = ok(app.sidebar.selectbox(key="sidebar_draft").set_value(first).run())
    assert app.selectbox(key="decode_draft").value == first  # the sidebar moved: the form follows again
