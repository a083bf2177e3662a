"""Runs are persisted step by step; a run that raises is kept, marked failed, with its steps."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from backend.jobs import run_replay_job
from backend.replay import ReplayConfig
from db import store
from db.artifacts import read_artifact


@pytest.fixture()
def database(tmp_path):
    url = f"sqlite:///{tmp_path / 'sub' / 'speclens.db'}"
    engine = store.make_engine(url)
    return url, engine, store.session_factory(engine)


def test_replay_round_trip(database, pairs):
    url, engine, factory = database
    pair = pairs["copy-L5-context"]
    outcome = run_replay_job(factory, store.artifact_root(url), pair.target, pair.draft, str(pair.draft_dir),
                             [1, 5, 9, 3], pair.wiring, ReplayConfig(3, 30), sample_ref="prompt")
    with store.session_scope(factory) as session:
        run = store.get_run(session, outcome.run_id)
        steps = store.get_steps(session, outcome.run_id)
        stats = session.execute(text("select count(*) from token_stats where run_id = :r"),
                                {"r": outcome.run_id}).scalar()
        journal = session.execute(text("PRAGMA journal_mode")).scalar()
    assert journal == "wal"
    assert run.status == "finished" and run.error is None and run.finished_at is not None
    assert run.output_ids == outcome.output_ids and run.aux_hf_indices == list(pair.wiring.aux_hf_indices)
    assert run.params["num_steps"] == 3 and run.params["wiring_source"] == pair.wiring.source
    assert run.step_count == len(outcome.steps) == len(steps)
    assert run.metrics["mean_accept_length"] == pytest.approx(
        1 + sum(s.accepted_count for s in outcome.steps) / len(outcome.steps))
    for stored, record in zip(steps, outcome.steps, strict=True):
        assert stored.drafted_ids == record.drafted_ids and stored.accepted_count == record.accepted_count
        assert stored.draft_top_ids == record.draft_top_ids and stored.bonus_id == record.bonus_id
        assert stored.draft_probs == pytest.approx(record.draft_probs)
    tensors = read_artifact(run.artifact_path, run.artifact_sha256)
    generated_positions = sum(min(len(s.committed_ids), s.accepted_count) + 1 for s in outcome.steps)
    assert tensors["aux_features"].shape == (generated_positions, 3 * 128)
    assert tensors["prompt_aux_features"].shape == (4, 3 * 128)
    # features exist for the prompt and for committed positions only, never past the output
    assert int(tensors["aux_positions"].max()) < 4 + len(outcome.output_ids)
    assert tensors["draft_hidden"].shape == (len(outcome.steps), 3, 128)
    assert stats == 3 * (4 + generated_positions)  # one norm per aux chunk per position
    with store.session_scope(factory) as session:
        assert [r.id for r in store.list_runs(session)] == [outcome.run_id]
        assert store.delete_run(session, outcome.run_id)
    with store.session_scope(factory) as session:
        assert store.get_run(session, outcome.run_id) is None
        assert session.execute(text("select count(*) from steps")).scalar() == 0


def test_a_run_that_raises_is_stored_as_failed_with_its_steps(database, pairs):
    url, _, factory = database
    pair = pairs["random-L6-eagle"]
    calls = []

    def crash_after_three_steps(done, total):
        calls.append(done)
        if len(calls) == 4:  # prefill + 3 verify steps
            raise RuntimeError("simulated crash: the GPU fell off the bus")

    with pytest.raises(RuntimeError, match="simulated crash"):
        run_replay_job(factory, store.artifact_root(url), pair.target, pair.draft, str(pair.draft_dir),
                       [1, 2, 3], pair.wiring, ReplayConfig(2, 40), progress=crash_after_three_steps)
    with store.session_scope(factory) as session:
        (run,) = store.list_runs(session)
        steps = store.get_steps(session, run.id)
    assert run.status == "failed" and "simulated crash" in run.error
    assert [s.step_index for s in steps] == [0, 1, 2]
    assert len(run.output_ids) == calls[-1]  # every token produced before the crash is kept
    assert run.metrics["verify_steps"] == 3
    assert read_artifact(run.artifact_path, run.artifact_sha256)["draft_hidden"].shape[0] == 3


def test_database_url_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECLENS_DB_URL", f"sqlite:///{tmp_path / 'env.db'}")
    engine = store.make_engine()
    assert engine.url.database.endswith("env.db") and (tmp_path / "env.db").exists()
    assert store.artifact_root() == tmp_path / "artifacts"


def test_artifact_checksum_is_verified(database, pairs, tmp_path):
    url, _, factory = database
    pair = pairs["random-L2"]
    outcome = run_replay_job(factory, store.artifact_root(url), pair.target, pair.draft, str(pair.draft_dir),
                             [3, 17], pair.wiring, ReplayConfig(2, 10))
    with store.session_scope(factory) as session:
        run = store.get_run(session, outcome.run_id)
    with open(run.artifact_path, "ab") as handle:
        handle.write(b"tampered")
    with pytest.raises(ValueError, match="sha256"):
        read_artifact(run.artifact_path, run.artifact_sha256)
