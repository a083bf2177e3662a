"""The schema under control: concurrent first openers, the recorded version, older databases
upgraded in place by the Alembic revisions (on SQLite and PostgreSQL), newer ones refused;
concurrent writers; runs whose writer is gone become interrupted."""

from __future__ import annotations

import multiprocessing
import sqlite3
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, inspect, text

from backend import BadInput
from db import schema, store
from db.models import Base


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


@pytest.mark.slow  # spawns eight processes (the marker's rule); its PostgreSQL twin below is slow too
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
        assert not store.write_run_batch(session, dead, [], [])  # deleted: the writer learns it is gone


def schema_differences(engine) -> list:
    """What the database lacks or has beyond db/models.py (Alembic's autogenerate comparison)."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from db.migrations.helpers import compare_type

    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": compare_type})
        return compare_metadata(context, Base.metadata)


def raw_engine(url: str):
    """An engine that does not touch the schema (store.make_engine would upgrade it)."""
    return create_engine(schema.engine_url(url))


def test_the_revisions_make_exactly_the_models(any_db_url):
    assert schema.SCHEMA_VERSION == int(schema.HEAD_REVISION)
    assert schema._script().get_current_head() == schema.HEAD_REVISION
    engine = store.make_engine(any_db_url)
    assert schema.stored_version(engine) == schema.SCHEMA_VERSION
    assert schema.alembic_revision(engine) == schema.HEAD_REVISION
    assert schema_differences(engine) == []
    engine.dispose()


def version_1_tables(connection) -> None:
    """Tables of a database made before the schema was versioned (runs without the writer columns,
    steps without `tree` or its index; no token_stats, checkpoints or serving_observations), with a
    finished run and its step."""
    postgres = connection.dialect.name == "postgresql"
    key, time = (
        ("SERIAL PRIMARY KEY", "TIMESTAMP") if postgres else ("INTEGER NOT NULL PRIMARY KEY", "DATETIME")
    )
    connection.execute(
        text(
            f"CREATE TABLE datasets (id {key}, name VARCHAR(200) NOT NULL, path TEXT, format VARCHAR(40) NOT NULL, "
            f"created_at {time} NOT NULL)"
        )
    )
    connection.execute(
        text(
            f"CREATE TABLE samples (id {key}, dataset_id INTEGER NOT NULL, "
            '"index" INTEGER NOT NULL, line INTEGER, source VARCHAR(200) NOT NULL, input_ids JSON NOT NULL, '
            "loss_mask JSON NOT NULL, prompt_len INTEGER NOT NULL, seq_len INTEGER NOT NULL, extra JSON, "
            "FOREIGN KEY (dataset_id) REFERENCES datasets (id) ON DELETE CASCADE)"
        )
    )
    connection.execute(text("CREATE INDEX ix_samples_dataset_id ON samples (dataset_id)"))
    connection.execute(
        text(
            f"CREATE TABLE runs (id {key}, kind VARCHAR(20) NOT NULL, status VARCHAR(20) NOT NULL, error TEXT, "
            "target_path TEXT NOT NULL, draft_path TEXT NOT NULL, "
            "sample_id INTEGER, sample_ref TEXT, "
            "prompt_ids JSON NOT NULL, params JSON NOT NULL, aux_hf_indices JSON NOT NULL, output_ids JSON NOT NULL, "
            "metrics JSON NOT NULL, artifact_path TEXT, artifact_sha256 VARCHAR(64), "
            f"created_at {time} NOT NULL, finished_at {time}, "
            "FOREIGN KEY (sample_id) REFERENCES samples (id) ON DELETE SET NULL)"
        )
    )
    connection.execute(
        text(
            f"CREATE TABLE steps (id {key}, run_id INTEGER NOT NULL, "
            "step_index INTEGER NOT NULL, position INTEGER NOT NULL, pending_token INTEGER NOT NULL, "
            "drafted_ids JSON NOT NULL, accepted_count INTEGER NOT NULL, bonus_id INTEGER NOT NULL, "
            "committed_ids JSON NOT NULL, target_argmax_ids JSON NOT NULL, target_argmax_probs JSON NOT NULL, "
            "draft_probs JSON NOT NULL, draft_top_ids JSON NOT NULL, draft_top_probs JSON NOT NULL, "
            "draft_ms FLOAT NOT NULL, verify_ms FLOAT NOT NULL, "
            "FOREIGN KEY (run_id) REFERENCES runs (id) ON DELETE CASCADE)"
        )
    )
    connection.execute(
        text(
            "INSERT INTO runs (kind, status, target_path, draft_path, prompt_ids, params, aux_hf_indices, "
            "output_ids, metrics, created_at, finished_at) VALUES ('replay', 'finished', 't', 'd', '[1, 2]', "
            "'{\"num_steps\": 3}', '[2, 4, 5]', '[7, 8, 9]', '{\"mean_accept_length\": 2.5}', "
            "'2024-01-02 03:04:05', '2024-01-02 03:04:06')"
        )
    )
    connection.execute(
        text(
            "INSERT INTO steps (run_id, step_index, position, pending_token, drafted_ids, accepted_count, bonus_id, "
            "committed_ids, target_argmax_ids, target_argmax_probs, draft_probs, draft_top_ids, draft_top_probs, "
            "draft_ms, verify_ms) VALUES (1, 0, 2, 5, '[7, 8]', 2, 9, '[7, 8, 9]', '[7, 8, 9]', '[]', '[0.5, 0.5]', "
            "'[]', '[]', 1.0, 2.0)"
        )
    )


def test_a_version_1_database_is_upgraded_in_place_keeping_its_runs(any_db_url):
    old = raw_engine(any_db_url)
    with old.begin() as connection:
        version_1_tables(connection)
    assert schema.stored_version(old) == 1 and schema.alembic_revision(old) is None
    old.dispose()
    engine = store.make_engine(any_db_url)
    assert schema.stored_version(engine) == schema.SCHEMA_VERSION
    assert schema.alembic_revision(engine) == schema.HEAD_REVISION
    assert {"writer_host", "writer_pid", "heartbeat_at"} <= {
        c["name"] for c in inspect(engine).get_columns("runs")
    }
    assert schema_differences(engine) == []  # every table, column and index of db/models.py is there
    factory = store.session_factory(engine)
    with store.session_scope(factory) as session:
        (run,) = store.list_runs(session)
        (step,) = store.get_steps(session, run.id)
        new = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[]
        )
    assert (run.id, run.status, run.output_ids, run.metrics) == (
        1,
        "finished",
        [7, 8, 9],
        {"mean_accept_length": 2.5},
    )
    assert step.drafted_ids == [7, 8] and step.tree is None and new == 2
    engine.dispose()


def test_a_version_2_database_from_before_alembic_is_adopted_in_place(any_db_url):
    """What the previous SpecLens made (every table, `speclens_schema` at 2, no `alembic_version`):
    stamped at the head revision, its runs untouched."""
    old = raw_engine(any_db_url)
    Base.metadata.create_all(old)
    with old.begin() as connection:
        connection.execute(schema.SchemaVersion.__table__.insert().values(id=1, version=2))
    factory = store.session_factory(old)
    with store.session_scope(factory) as session:
        run_id = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params={"k": 1}, aux_hf_indices=[0]
        )
    old.dispose()
    engine = store.make_engine(any_db_url)
    assert schema.alembic_revision(engine) == schema.HEAD_REVISION and schema_differences(engine) == []
    with store.session_scope(store.session_factory(engine)) as session:
        assert [(r.id, r.params) for r in store.list_runs(session)] == [(run_id, {"k": 1})]
    engine.dispose()


def test_a_newer_database_is_refused_on_either_record(any_db_url):
    store.make_engine(any_db_url).dispose()
    engine = raw_engine(any_db_url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE speclens_schema SET version = 7"))
    with pytest.raises(BadInput, match="the database has schema version 7, newer than this SpecLens"):
        store.make_engine(any_db_url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE speclens_schema SET version = 2"))
        connection.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(BadInput, match="schema revision '0099', which this SpecLens does not know"):
        store.make_engine(any_db_url)
    engine.dispose()


@pytest.mark.slow
def test_eight_concurrent_first_openers_on_postgresql(postgres_url):
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(8)
        with context.Pool(8) as pool:
            results = pool.starmap(_open, [(postgres_url, barrier)] * 8)
    assert results == ["ok"] * 8
    engine = raw_engine(postgres_url)
    with engine.connect() as connection:
        assert connection.scalar(text("SELECT COUNT(*) FROM runs")) == 8
        assert connection.execute(text("SELECT version FROM speclens_schema")).all() == [
            (schema.SCHEMA_VERSION,)
        ]
        assert connection.execute(text("SELECT version_num FROM alembic_version")).all() == [
            (schema.HEAD_REVISION,)
        ]
    engine.dispose()


def _write_runs(url: str, barrier, writer: int, runs: int, steps: int) -> str:
    """One writer process: `runs` runs, each created, given its steps and token stats in batches
    with heartbeats, and finished (what a replay job does), all the while the other writer does too."""
    from backend.run.records import StepRecord

    try:
        engine = store.make_engine(url)
        factory = store.session_factory(engine)
        barrier.wait()
        for number in range(runs):
            with store.session_scope(factory) as session:
                run_id = store.create_run(
                    session,
                    kind="replay",
                    target_path=f"t{writer}",
                    draft_path="d",
                    params={"n": number},
                    aux_hf_indices=[0, 1, 2],
                )
            for start in range(0, steps, 5):
                batch = [
                    StepRecord(i, i, 1, [i, i + 1], 1, 3, [i, 3], [i, 3], draft_ms=0.5, verify_ms=1.0)
                    for i in range(start, min(start + 5, steps))
                ]
                stats = [{"position": s.step_index, "chunk": "hf0", "norm": 1.0} for s in batch]
                with store.session_scope(factory) as session:
                    assert store.write_run_batch(session, run_id, batch, stats, [writer] * start)
            with store.session_scope(factory) as session:
                store.finish_run(session, run_id, output_ids=[writer] * steps, metrics={"writer": writer})
        engine.dispose()
        return "ok"
    except Exception as error:  # noqa: BLE001 - reported to the test
        return f"{type(error).__name__}: {error}"


@pytest.mark.slow
def test_two_processes_write_runs_at_once(any_db_url):
    store.make_engine(any_db_url).dispose()
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(2)
        with context.Pool(2) as pool:
            results = pool.starmap(_write_runs, [(any_db_url, barrier, writer, 12, 20) for writer in (1, 2)])
    assert results == ["ok", "ok"]
    factory = store.session_factory(store.make_engine(any_db_url))
    with store.session_scope(factory) as session:
        runs = store.list_runs(session)
        counts = {run.id: store.get_run(session, run.id).step_count for run in runs}
        stats = {run.id: len(store.get_token_stats(session, run.id)) for run in runs}
    assert len(runs) == 24 and {run.status for run in runs} == {"finished"}
    assert sorted(run.metrics["writer"] for run in runs) == [1] * 12 + [2] * 12
    assert set(counts.values()) == {20} and set(stats.values()) == {20}


def test_a_run_deleted_while_its_writer_commits_a_batch(any_db_url):
    """A writer's batch holds its run's row: a delete waits for the batch to commit and takes its
    steps along; the writer's next heartbeat finds the run gone (its job stops with RunGone), never
    a foreign-key error or a lost update, on either backend."""
    import threading

    from backend.run.records import StepRecord

    engine = store.make_engine(any_db_url)
    factory = store.session_factory(engine)
    with store.session_scope(factory) as session:
        run_id = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[0]
        )
    writer = factory()
    batch = [StepRecord(0, 3, 1, [4], 1, 5, [4, 5], [4, 5], draft_ms=1.0, verify_ms=1.0)]
    assert store.write_run_batch(writer, run_id, batch, [], [1, 2])
    deleted = []

    def delete() -> None:
        with store.session_scope(factory) as session:
            deleted.append(store.delete_run(session, run_id, force=True))

    deleter = threading.Thread(target=delete)
    deleter.start()
    deleter.join(0.3)
    assert deleter.is_alive()  # its DELETE waits for the writer's batch
    writer.commit()
    deleter.join(30)
    assert deleted == [True]
    assert not store.write_run_batch(writer, run_id, [], [])  # the writer learns its run is gone
    writer.close()
    with store.session_scope(factory) as session:
        assert store.get_run(session, run_id) is None and store.get_steps(session, run_id) == []
    engine.dispose()
