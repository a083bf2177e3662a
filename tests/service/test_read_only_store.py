"""Issue 65 row 5: a store this process cannot write (a 0444 file, a read-only share) is said before
anything is tried (the sidebar, on every page), and each write the pages make on it (Runs' delete,
Samples' import and delete) is refused in one line naming the database, never a driver's traceback."""

from __future__ import annotations

import os

import pytest

from backend import BadInput
from backend.defaults import DEMO_EVAL
from backend.service import database as databases
from backend.service import datasets, runs
from db import store


@pytest.fixture()
def read_only_url(tmp_path, monkeypatch):
    """A store with one finished run and one dataset, then seen as a user who may not write it sees
    it (os.access says no, as for another user's 0444 file; root may write anything, so the check
    answers as for that user): the store opens it read-only, as it does for them."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    with store.session_scope(databases.open_database(url).factory) as session:
        run_id = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[]
        )
        store.finish_run(session, run_id, output_ids=[1], metrics={})
    dataset_id, _ = datasets.import_dataset(url, DEMO_EVAL, "eval")
    databases.open_database(url).close()
    databases._open.cache_clear()
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode, **kw: False if mode & os.W_OK else real_access(path, mode, **kw)
    )
    yield url, run_id, dataset_id
    databases._open.cache_clear()


def test_a_read_only_store_is_said_before_and_refuses_each_write_in_one_line(read_only_url, tmp_path):
    url, run_id, dataset_id = read_only_url
    assert "is read-only here" in databases.write_problem(url)
    assert runs.get_run(url, run_id).status == "finished"  # reading still works
    for write in (
        lambda: runs.delete_run(url, run_id),
        lambda: datasets.import_dataset(url, DEMO_EVAL, "again"),
        lambda: datasets.delete_dataset(url, dataset_id),
    ):
        with pytest.raises(BadInput) as said:
            write()
        line = str(said.value)
        assert "\n" not in line and line.startswith(f"database {url}") and "readonly database" in line
    assert runs.get_run(url, run_id) is not None


def test_a_writable_store_says_nothing(tmp_path):
    assert databases.write_problem(f"sqlite:///{tmp_path / 'mine.db'}") is None
