"""The job runner: a replay is persisted step by step with its artifact; a run that raises is kept,
marked failed, with its steps; `run_replay` loads the pair, resolves the wiring once and stores it."""

from __future__ import annotations

import pytest


def request_for(pair, prompt_ids, num_steps, max_new_tokens, **kwargs):
    from backend.run.request import ReplayRequest

    return ReplayRequest(
        str(pair.target_dir),
        str(pair.draft_dir),
        prompt_ids=tuple(prompt_ids),
        num_steps=num_steps,
        max_new_tokens=max_new_tokens,
        **kwargs,
    )


def test_replay_round_trip(pairs, tmp_path):
    from dataclasses import replace

    from sqlalchemy import text

    from backend.engine.replay import ReplayConfig, output_ids_of, replay
    from backend.service.database import open_database
    from backend.service.jobs import run_plan
    from backend.service.plan import resolve
    from db import store
    from db.artifacts import read_artifact

    database = open_database(f"sqlite:///{tmp_path / 'sub' / 'speclens.db'}")
    factory = database.factory
    pair = pairs["copy-L5-context"]
    request = request_for(pair, [1, 5, 9, 3], 3, 30, sample_ref="prompt")
    plan = replace(resolve(request, pair.target, pair.draft), warnings=("context: a warning",))
    outcome = run_plan(database, pair.target, pair.draft, plan)
    assert outcome.warnings == ["context: a warning"] and outcome.wiring == pair.wiring
    expected = output_ids_of(
        list(replay(pair.target, pair.draft, [1, 5, 9, 3], pair.wiring, ReplayConfig(3, 30)))
    )
    assert outcome.output_ids == expected
    with store.session_scope(factory) as session:
        run = store.get_run(session, outcome.run_id)
        steps = store.get_steps(session, outcome.run_id)
        stats = session.execute(
            text("select count(*) from token_stats where run_id = :r"), {"r": outcome.run_id}
        ).scalar()
        journal = session.execute(text("PRAGMA journal_mode")).scalar()
    assert journal == "wal"
    assert run.status == "finished" and run.error is None and run.finished_at is not None
    assert run.output_ids == outcome.output_ids and run.aux_hf_indices == list(pair.wiring.aux_hf_indices)
    assert run.params["num_steps"] == 3 and run.params["wiring_source"] == pair.wiring.source
    assert run.params["wiring_override"] is None and run.sample_ref == "prompt"
    assert run.target_path == str(pair.target_dir) and run.draft_path == str(pair.draft_dir)
    assert run.step_count == len(outcome.steps) == len(steps)
    assert run.metrics["mean_accept_length"] == pytest.approx(
        1 + sum(s.accepted_count for s in outcome.steps) / len(outcome.steps)
    )
    for stored, record in zip(steps, outcome.steps, strict=True):
        assert stored.drafted_ids == record.drafted_ids and stored.accepted_count == record.accepted_count
        assert stored.draft_top_ids == record.draft_top_ids and stored.bonus_id == record.bonus_id
        assert stored.draft_probs == pytest.approx(record.draft_probs)
    tensors = read_artifact(run.artifact_path, run.artifact_sha256)
    assert run.artifact_path == outcome.artifact_path and run.artifact_path.startswith(
        str(database.artifact_dir)
    )
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


def test_a_run_records_whose_forward_ran_the_target(pairs, tmp_path, monkeypatch):
    """A Llama target on the CPU runs SpecLens's lean forward unless it was loaded with
    SPECLENS_LEAN_TARGET=0; each run says which, and both give the same output."""
    from dataclasses import replace

    from backend.service.database import open_database
    from backend.service.jobs import run_plan
    from backend.service.plan import resolve
    from backend.target.lean_target import target_runner
    from db import store

    database = open_database(f"sqlite:///{tmp_path / 'speclens.db'}")
    pair = pairs["copy-L5-context"]
    seen = {}
    for setting in (None, "0"):
        if setting is None:
            monkeypatch.delenv("SPECLENS_LEAN_TARGET", raising=False)
        else:
            monkeypatch.setenv("SPECLENS_LEAN_TARGET", setting)
        target = replace(pair.target, runner=target_runner(pair.target.model))  # as loaded with it
        request = request_for(pair, [1, 5, 9, 3], 3, 30)
        outcome = run_plan(database, target, pair.draft, resolve(request, target, pair.draft))
        with store.session_scope(database.factory) as session:
            seen[setting] = (
                store.get_run(session, outcome.run_id).params["target_forward"],
                outcome.output_ids,
            )
    assert seen[None][0] == "lean" and seen["0"][0] == "transformers"
    assert seen[None][1] == seen["0"][1]


def test_a_run_that_raises_is_stored_as_failed_with_its_steps(pairs, tmp_path):
    from backend.service.database import open_database
    from backend.service.jobs import run_plan
    from backend.service.plan import resolve
    from db import store
    from db.artifacts import read_artifact

    database = open_database(f"sqlite:///{tmp_path / 'speclens.db'}")
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
            resolve(request_for(pair, [1, 2, 3], 2, 40), pair.target, pair.draft),
            progress=crash_after_three_steps,
        )
    with store.session_scope(database.factory) as session:
        (run,) = store.list_runs(session)
        steps = store.get_steps(session, run.id)
    assert run.status == "failed" and "simulated crash" in run.error
    assert [s.step_index for s in steps] == [0, 1, 2]
    # every token produced before the crash is kept: the last progress said how many
    fraction, message = calls[-1]
    assert message == f"{len(run.output_ids)}/40 tokens" and fraction == pytest.approx(
        len(run.output_ids) / 40
    )
    assert run.metrics["verify_steps"] == 3
    assert read_artifact(run.artifact_path, run.artifact_sha256)["draft_hidden"].shape[0] == 3


def test_run_replay_loads_the_pair_and_resolves_the_wiring_once(pairs, db_url):
    from backend.service.jobs import run_replay
    from backend.service.runs import get_run_with_steps
    from tests.support.oracle import plain_greedy

    pair = pairs["copy-L4-bigram"]
    seen = []
    outcome = run_replay(request_for(pair, [1, 5, 9], 3, 12), db_url, lambda f, m: seen.append((f, m)))
    assert outcome.output_ids == plain_greedy(pair.target, [1, 5, 9], 12)
    assert outcome.wiring == pair.wiring and seen[0] == (0.0, "loading models") and seen[-1][0] == 1.0
    overridden = run_replay(
        request_for(pair, [1, 5, 9], 3, 12, aux_hf_indices=(0, 2, 4), record=False), db_url
    )
    assert overridden.wiring.aux_hf_indices == (0, 2, 4) and "override" in overridden.wiring.source
    assert overridden.artifact_path is None  # nothing recorded
    run, steps = get_run_with_steps(db_url, overridden.run_id)
    assert run.aux_hf_indices == [0, 2, 4] and run.params["wiring_override"] == [0, 2, 4]
    assert run.params["record"] is False and len(steps) == len(overridden.steps)
    # the declared wiring again: the override was a property of the request, not of the loaded draft
    assert run_replay(request_for(pair, [1, 5, 9], 3, 4), db_url).wiring == pair.wiring


def test_a_bf16_run_measures_the_targets_self_disagreement(pairs, db_url):
    """fp32 runs equal plain greedy and need no yardstick; a bf16 run stores the target's own
    verify-vs-decode disagreement rate with its device and dtype (shown on Decode and Runs)."""
    from backend.diagnostics.precision import self_disagreement
    from backend.service import models
    from backend.service.jobs import run_replay
    from backend.service.runs import get_run

    pair = pairs["random-L6-eagle"]
    fp32 = run_replay(request_for(pair, [1, 2, 3], 3, 16, device="cpu", dtype="fp32"), db_url)
    assert fp32.metrics.self_disagreement_per_1000 is None
    bf16 = run_replay(request_for(pair, [1, 2, 3], 3, 16, device="cpu", dtype="bf16"), db_url)
    run = get_run(db_url, bf16.run_id)
    assert (run.params["device"], run.params["dtype"]) == ("cpu", "bfloat16")
    target = models.target(str(pair.target_dir), "cpu", "bf16")
    expected = self_disagreement(target, [1, 2, 3], bf16.output_ids, 3).per_1000
    assert run.metrics["self_disagreement_per_1000"] == expected


def test_long_samples_warn_about_the_drafts_context(pairs, db_url):
    from backend.service.jobs import run_replay

    pair = pairs["random-L2"]
    outcome = run_replay(request_for(pair, list(range(1, 40)) * 53, 1, 2, record=False), db_url)
    assert any(w.startswith("context: ") and "max_position_embeddings (2048)" in w for w in outcome.warnings)


def test_chunk_norms_and_run_metrics():
    import torch

    from backend.run.metrics import run_metrics
    from backend.run.records import StepRecord
    from backend.service.run_tensors import chunk_norms

    rows = chunk_norms(torch.tensor([[3.0, 4.0, 0.0, 1.0, 2.0, 0.0]]), 5, [0, 2, 4])
    assert rows == [
        {"position": 5, "chunk": "hf0", "norm": 5.0},
        {"position": 5, "chunk": "hf2", "norm": 1.0},
        {"position": 5, "chunk": "hf4", "norm": 2.0},
    ]
    step = StepRecord(0, 3, 4, [1, 2], 1, 9, [1, 9], [1, 9, 9], draft_ms=2.0, verify_ms=5.0)
    metrics = run_metrics([step, step], 2)
    assert metrics.mean_accept_length == 2.0 and metrics.draft_ms_total == 4.0
    assert metrics.verify_ms_total == 10.0
