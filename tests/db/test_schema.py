"""The schema under control: concurrent first openers, the recorded version, older databases
upgraded in place, newer ones refused; runs whose writer is gone become interrupted."""

from __future__ import annotations

import multiprocessing
import sqlite3
from datetime import timedelta

import pytest

from backend import BadInput
from db import schema, store


def _open(url: str, barrier) -> str:
    barrier.wait()
    try:
        engine = store.make_engine(url)
        with store.session_scope(store.session_factory(engine)) as session:
            store.create_run(
                session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[]
            )
        engine.dispose()
        return "ok"
    except Exception as error:  # noqa: BLE001 - reported to the test
        return f"{type(error).__name__}: {error}"


def test_eight_concurrent_first_openers_all_succeed(tmp_path):
    url = f"sqlite:///{tmp_path / 'new.db'}"
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(8)
        with context.Pool(8) as pool:
            results = pool.starmap(_open, [(url, barrier)] * 8)
    assert results == ["ok"] * 8
    with sqlite3.connect(tmp_path / "new.db") as connection:
        assert connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 8
        assert connection.execute("SELECT version FROM speclens_schema").fetchall() == [
            (schema.SCHEMA_VERSION,)
        ]


def test_an_older_database_is_upgraded_and_a_newer_one_refused(tmp_path):
    old = tmp_path / "old.db"
    with sqlite3.connect(old) as connection:  # a version-1 database: runs without the writer columns
        connection.execute(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, kind VARCHAR(20), status VARCHAR(20), error TEXT, "
            "target_path TEXT, draft_path TEXT, sample_id INTEGER, sample_ref TEXT, prompt_ids JSON, params JSON, "
            "aux_hf_indices JSON, output_ids JSON, metrics JSON, artifact_path TEXT, artifact_sha256 VARCHAR(64), "
            "created_at DATETIME, finished_at DATETIME)"
        )
    engine = store.make_engine(f"sqlite:///{old}")
    assert schema.stored_version(engine) == schema.SCHEMA_VERSION
    with sqlite3.connect(old) as connection:
        columns = {row[1] for row in connection.execute("PRAGMA table_info(runs)")}
        assert {"writer_host", "writer_pid", "heartbeat_at"} <= columns
        connection.execute("UPDATE speclens_schema SET version = 7")
    engine.dispose()
    with pytest.raises(BadInput, match="old.db: the database has schema version 7, newer than"):
        store.make_engine(f"sqlite:///{old}")


def test_runs_whose_writer_is_gone_are_interrupted_and_a_recording_run_is_not_deleted(tmp_path):
    factory = store.session_factory(store.make_engine(f"sqlite:///{tmp_path / 'r.db'}"))
    with store.session_scope(factory) as session:
        mine = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[]
        )
        dead = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[]
        )
        remote = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[]
        )
        far = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[]
        )
    with store.session_scope(factory) as session:
        from db.models import Run

        session.get(Run, dead).writer_pid = 2**22 + 12345  # no such process on this host
        for run_id, age in ((remote, 60), (far, 3600)):  # another host: only the heartbeat's age tells
            run = session.get(Run, run_id)
            run.writer_host = "elsewhere"
            run.heartbeat_at = store.utc_now() - timedelta(seconds=age)
    with store.session_scope(factory) as session:
        assert sorted(store.reap_stale_runs(session)) == sorted([dead, far])
        with pytest.raises(store.RunBusy, match="still recording"):
            store.delete_run(session, mine)
        assert store.delete_run(session, dead)
    with store.session_scope(factory) as session:
        statuses = {r.id: r.status for r in store.list_runs(session)}
        assert statuses == {mine: "running", remote: "running", far: "interrupted"}
        assert not store.heartbeat(session, dead)  # deleted: the writer learns it is gone
