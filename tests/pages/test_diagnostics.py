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
