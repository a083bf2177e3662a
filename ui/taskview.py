"""One way for every page to show a background task: a progress bar polled while it runs, a single
full rerun when it finishes (with an optional hook to pick up its result), then its error (and the
preflight report of a refused draft) or its rendered result."""

from __future__ import annotations

import time
from collections.abc import Callable

import pandas as pd
import streamlit as st

from backend.service import tasks
from ui.html import md


def task_panel(
    key: str,
    render: Callable | None = None,
    on_finish: Callable | None = None,
    failure: str = "",
    adopt: str | None = None,
) -> None:
    """`adopt`: a task kind. A browser session that has never started a task under `key` (a reload, a
    second tab) takes over the newest one of that kind still running in this server, so its progress
    stays on screen and its result is picked up when it ends."""
    if adopt is not None and key not in st.session_state:
        _adopt(key, adopt)
    current = tasks.MANAGER.get(st.session_state.get(key))
    unseen = current is not None and st.session_state.get(f"{key}_seen") != (current.id, current.status)

    # Poll only while there is something to wait for: every poll is a script run on the server.
    @st.fragment(run_every=1.0 if current is not None and (current.active or unseen) else None)
    def poll() -> None:
        _poll(key, on_finish)

    poll()
    task = tasks.MANAGER.get(st.session_state.get(key))
    if task is None or task.active:
        return
    if task.status == "failed":
        _show_failure(key, task, failure)
    elif render is not None:
        render(task.result)


def _adopt(key: str, kind: str) -> None:
    """Take over the newest running task of `kind` under `key`."""
    running = [t for t in tasks.MANAGER.list(kind) if t.active]
    if running:
        st.session_state[key] = running[0].id


def _poll(key: str, on_finish: Callable | None) -> None:
    """One poll: the progress bar while the task runs; once it has ended, the finish hook (when it is
    done) and one full rerun, the first time this session sees that end."""
    task = tasks.MANAGER.get(st.session_state.get(key))
    if task is None:
        return
    if task.active:
        elapsed = time.time() - task.started
        st.progress(
            task.progress,
            text=f"{task.label}: {task.message or task.status} · {100 * task.progress:.0f}% · {elapsed:.0f} s"
            + time_left(task.progress, elapsed),
        )
    elif st.session_state.get(f"{key}_seen") != (task.id, task.status):
        st.session_state[f"{key}_seen"] = (task.id, task.status)
        if task.status == "done" and on_finish is not None:
            on_finish(task.result)
        st.rerun()


def time_left(fraction: float, elapsed: float) -> str:
    """An estimate of the time left at the pace so far, once there is a pace to go by (5% done and 10 s
    spent); said as an estimate: a job's phases do not all move at one pace."""
    if not 0.05 <= fraction < 1 or elapsed < 10:
        return ""
    left = elapsed * (1 - fraction) / fraction
    return (
        f" · about {left / 60:.0f} min left at this pace"
        if left >= 90
        else f" · about {left:.0f} s left at this pace"
    )


def _show_failure(key: str, task, failure: str) -> None:
    """The error's first line, then the refused draft's preflight checks or the full error."""
    st.error(f"{failure}{md(task.error.splitlines()[0]) if task.error else 'failed'}")
    report = task.details.preflight
    if report is not None:
        st.dataframe(
            pd.DataFrame([c.to_dict() for c in report.checks]), hide_index=True, key=f"{key}_preflight"
        )
    elif task.error and "\n" in task.error:
        with st.expander("Details"):
            st.code(task.error)
