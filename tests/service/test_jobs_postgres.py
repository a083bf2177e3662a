"""The job runner on a real PostgreSQL server (tests/support/postgres.py): a replay persisted step
by step with its token stats and artifact, a run that raises kept as failed with its steps, the
dashboard's worker process writing a run, and test_jobs.py's / test_runs.py's tests that take
`db_url`, run again with `db_url` naming a fresh PostgreSQL database."""

from __future__ import annotations

import pytest

from tests.service import test_jobs as sqlite_jobs
from tests.service import test_runs as sqlite_runs

pytestmark = pytest.mark.slow  # starts the session's PostgreSQL server


@pytest.fixture()
def db_url(postgres_url) -> str:
    """Overrides tests/conftest.py's SQLite `db_url` for this module (and `stored_run` built on it)."""
    return postgres_url


test_run_replay_loads_the_pair_and_resolves_the_wiring_once = (
    sqlite_jobs.test_run_replay_loads_the_pair_and_resolves_the_wiring_once
)
test_long_samples_warn_about_the_drafts_context = sqlite_jobs.test_long_samples_warn_about_the_drafts_context
test_list_read_export_and_delete = sqlite_runs.test_list_read_export_and_delete
test_find_finished_run_matches_target_draft_prompt_and_every_setting = (
    sqlite_runs.test_find_finished_run_matches_target_draft_prompt_and_every_setting
)
test_find_finished_run_skips_unfinished_runs_and_prefers_the_same_sample = (
    sqlite_runs.test_find_finished_run_skips_unfinished_runs_and_prefers_the_same_sample
)


def test_replay_round_trip_on_postgresql(pairs, db_url, tmp_path):
    from sqlalchemy import text

    from backend.engine.replay import ReplayConfig, output_ids_of, replay
    from backend.service.database import open_database
    from backend.service.jobs import run_plan
    from backend.service.plan import resolve
    from db import store
    from db.artifacts import read_artifact

    database = open_database(db_url)
    assert database.factory.kw["bind"].dialect.name == "postgresql"
    assert database.artifact_dir == tmp_path / "artifacts"  # SPECLENS_ARTIFACT_DIR (postgres_url sets it)
    pair = pairs["copy-L5-context"]
    request = sqlite_jobs.request_for(pair, [1, 5, 9, 3], 3, 30, sample_ref="prompt")
    outcome = run_plan(database, pair.target, pair.draft, resolve(request, pair.target, pair.draft))
    expected = output_ids_of(
        list(replay(pair.target, pair.draft, [1, 5, 9, 3], pair.wiring, ReplayConfig(3, 30)))
    )
    assert outcome.output_ids == expected
    with store.session_scope(database.factory) as session:
        run = store.get_run(session, outcome.run_id)
        steps = store.get_steps(session, outcome.run_id)
        stats = session.scalar(
            text("select count(*) from token_stats where run_id = :r"), {"r": outcome.run_id}
        )
    assert run.status == "finished" and run.error is None and run.finished_at is not None
    assert run.output_ids == outcome.output_ids and run.aux_hf_indices == list(pair.wiring.aux_hf_indices)
    assert run.params["num_steps"] == 3 and run.params["wiring_source"] == pair.wiring.source
    assert run.step_count == len(outcome.steps) == len(steps) and run.heartbeat_at is not None
    for stored, record in zip(steps, outcome.steps, strict=True):
        assert stored.drafted_ids == record.drafted_ids and stored.accepted_count == record.accepted_count
        assert stored.draft_top_ids == record.draft_top_ids and stored.tree == record.tree
        assert stored.draft_probs == pytest.approx(record.draft_probs)
    generated_positions = sum(min(len(s.committed_ids), s.accepted_count) + 1 for s in outcome.steps)
    assert stats == 3 * (4 + generated_positions)
    tensors = read_artifact(run.artifact_path, run.artifact_sha256)
    assert tensors["draft_hidden"].shape == (len(outcome.steps), 3, 128)
    with store.session_scope(database.factory) as session:
        assert store.delete_run(session, outcome.run_id)
    with store.session_scope(database.factory) as session:  # steps and token stats went with it
        assert session.scalar(text("select count(*) from steps")) == 0
        assert session.scalar(text("select count(*) from token_stats")) == 0


def test_a_run_that_raises_is_stored_as_failed_with_its_steps_on_postgresql(pairs, db_url):
    from backend.service.database import open_database
    from backend.service.jobs import run_plan
    from backend.service.plan import resolve
    from db import store

    database = open_database(db_url)
    pair = pairs["random-L6-eagle"]
    calls = []

    def crash_after_three_steps(fraction, message):
        calls.append((fraction, message))
        if len(calls) == 4:  # prefill + 3 verify steps
            raise RuntimeError("simulated crash: the GPU fell off the bus")

    with pytest.raises(RuntimeError, match="simulated crash"):
        run_plan(
            database,
            pair.target,
            pair.draft,
            resolve(sqlite_jobs.request_for(pair, [1, 2, 3], 2, 40), pair.target, pair.draft),
            progress=crash_after_three_steps,
        )
    with store.session_scope(database.factory) as session:
        (run,) = store.list_runs(session)
        steps = store.get_steps(session, run.id)
    assert run.status == "failed" and "simulated crash" in run.error
    assert [s.step_index for s in steps] == [0, 1, 2] and run.metrics["verify_steps"] == 3


def test_the_worker_process_writes_a_run_to_postgresql(pairs, db_url):
    """The dashboard's worker (another process, models kept between jobs) stores its run on the
    shared server; nothing recorded, so no artifact folder is involved."""
    from backend.service.runs import get_run
    from backend.service.tasks import MANAGER, start_replay

    pair = pairs["copy-L4-bigram"]
    request = sqlite_jobs.request_for(pair, [1, 5, 9], 3, 12, sample_ref="prompt", record=False)
    task = MANAGER.wait(start_replay(db_url, request), 120)
    assert task.status == "done", task.error
    run = get_run(db_url, task.result.run_id)
    assert run.status == "finished" and run.metrics["mean_accept_length"] == task.result.mean_accept_length
    assert run.params["record"] is False and run.artifact_path is None
