"""The database the pages under test use (helpers: tests/support/pages.py)."""

from __future__ import annotations

import pytest


@pytest.fixture()
def db(tmp_path, monkeypatch):
    """SPECLENS_DB_URL in the test's temporary directory, with the bundled demo pair active."""
    url = f"sqlite:///{tmp_path / 'pages.db'}"
    monkeypatch.setenv("SPECLENS_DB_URL", url)
    monkeypatch.delenv("SPECLENS_TARGET", raising=False)
    monkeypatch.delenv("SPECLENS_DRAFT", raising=False)
    return url
