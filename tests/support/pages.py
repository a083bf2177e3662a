"""Helpers for page tests under Streamlit's AppTest (widgets are looked up by key)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def page(name: str):
    """AppTest of app.py ("home") or pages/<name>.py."""
    from streamlit.testing.v1 import AppTest

    path = REPO / ("app.py" if name == "home" else f"pages/{name}.py")
    return AppTest.from_file(str(path), default_timeout=120)


def finish(app, key: str):
    """Wait for the background task whose id the page keeps under `key`, then rerun the page."""
    from backend.service.tasks import MANAGER

    task = MANAGER.wait(app.session_state[key], 300)
    assert task.status == "done", task.error
    return app.run()


def frame_with(app, column: str):
    """The page's table that has `column` (AppTest looks up only widgets by key, not plain tables)."""
    frames = [f.value for f in app.dataframe if column in f.value.columns]
    assert frames, f"no table with a {column!r} column"
    return frames[0]


def ok(app):
    assert not app.exception, [e.message for e in app.exception]
    return app
