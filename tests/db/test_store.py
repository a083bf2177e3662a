"""The store: runs, steps (as StepRecord), datasets (as Sample), token stats; the database URL."""

from __future__ import annotations

import pytest

from backend.data.samples import Sample
from backend.engine.records import StepRecord
from db import store


@pytest.fixture()
def factory(db_url):
    return store.session_factory(store.make_engine(db_url))


def step(index: int, accepted: int) -> StepRecord:
    drafted = [10 + index, 20 + index]
    return StepRecord(
        index,
        3 + index,
        4,
        drafted,
        accepted,
        9,
        drafted[:accepted] + [9],
        [1, 2, 3],
        draft_ms=1.5,
        verify_ms=2.5,
        draft_probs=[0.5, 0.25],
        draft_top_ids=[[1, 2], [3, 4]],
        draft_top_probs=[[0.5, 0.1], [0.25, 0.2]],
        target_argmax_probs=[0.9, 0.8, 0.7],
        tree={
            "tokens": drafted + [30],
            "parents": [-1, 0, -1],
            "scores": [0.5, 0.125, 0.25],
            "depths": [1, 2, 1],
            "accepted_path": [0, 1][:accepted],
            "draws": [0.25, None, None],
            "decisions": ["accepted", "rejected", "unreached"],
        },
    )


def test_database_url_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECLENS_DB_URL", f"sqlite:///{tmp_path / 'env.db'}")
    engine = store.make_engine()
    assert engine.url.database.endswith("env.db") and (tmp_path / "env.db").exists()
    assert store.artifact_root() == tmp_path / "artifacts"
    monkeypatch.delenv("SPECLENS_DB_URL")
    assert store.database_url() == "sqlite:///data/speclens.db"
    monkeypatch.setenv("SPECLENS_ARTIFACT_DIR", str(tmp_path / "elsewhere"))
    assert store.artifact_root("postgresql://host/db") == tmp_path / "elsewhere"


def test_runs_and_their_steps(factory):
    with store.session_scope(factory) as session:
        run_id = store.create_run(
            session,
            kind="replay",
            target_path="t",
            draft_path="d",
            params={"num_steps": 2},
            aux_hf_indices=[2, 4, 5],
            prompt_ids=[1, 2, 3],
            sample_ref="prompt",
        )
        for index, accepted in enumerate([2, 0, 1]):
            store.add_step(session, run_id, step(index, accepted))
        store.add_token_stats(session, run_id, [{"position": 0, "chunk": "hf2", "norm": 1.0}])
    with store.session_scope(factory) as session:
        running = store.get_run(session, run_id)
        store.finish_run(session, run_id, output_ids=[5, 6], metrics={"mean_accept_length": 2.0})
    assert running.status == "running" and running.finished_at is None and running.step_count == 3
    with store.session_scope(factory) as session:
        run = store.get_run(session, run_id)
        steps = store.get_steps(session, run_id)
        listed = store.list_runs(session)
        stats = store.get_token_stats(session, run_id)
    assert (
        run.status == "finished" and run.output_ids == [5, 6] and run.metrics == {"mean_accept_length": 2.0}
    )
    assert run.prompt_ids == [1, 2, 3] and run.aux_hf_indices == [2, 4, 5] and run.finished_at is not None
    assert [r.id for r in listed] == [run_id]
    assert all(isinstance(s, StepRecord) for s in steps)
    assert steps == [step(i, a) for i, a in enumerate([2, 0, 1])]  # every stored field comes back
    assert steps[0].aux_features is None and steps[0].draft_hidden is None  # tensors live in the artifact
    assert stats == [
        {
            "position": 0,
            "chunk": "hf2",
            "norm": 1.0,
            "reference": None,
            "cosine": None,
            "norm_ratio": None,
            "max_abs_diff": None,
            "relative_error": None,
        }
    ]
    with store.session_scope(factory) as session:
        assert store.delete_run(session, run_id)
    with store.session_scope(factory) as session:
        assert not store.delete_run(session, run_id)
        assert store.get_run(session, run_id) is None and store.get_steps(session, run_id) == []
        assert store.get_token_stats(session, run_id) == []


def test_a_failed_run_keeps_its_error_and_output(factory):
    with store.session_scope(factory) as session:
        run_id = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[0, 1, 2]
        )
        store.fail_run(
            session, run_id, error="RuntimeError: boom", output_ids=[7], metrics={"verify_steps": 0}
        )
    with store.session_scope(factory) as session:
        run = store.get_run(session, run_id)
    assert (run.status, run.error, run.output_ids, run.metrics) == (
        "failed",
        "RuntimeError: boom",
        [7],
        {"verify_steps": 0},
    )


def test_datasets_and_samples(factory):
    samples = [Sample([1, 2, 3], [0, 1, 1], 1, "a", 1, {"text": "x"}), Sample([4, 5], [0, 0], 2, "b", 3)]
    with store.session_scope(factory) as session:
        dataset_id = store.create_dataset(
            session, name="mine", path="/m.jsonl", format="jsonl", samples=samples
        )
        empty_id = store.create_dataset(session, name="empty", path=None, format="jsonl", samples=[])
    with store.session_scope(factory) as session:
        datasets = store.list_datasets(session)
        stored = store.get_samples(session, dataset_id)
    assert [(d.id, d.name, d.sample_count) for d in datasets] == [
        (dataset_id, "mine", 2),
        (empty_id, "empty", 0),
    ]
    assert all(isinstance(s, Sample) for s in stored)
    assert [
        (s.input_ids, s.loss_mask, s.prompt_len, s.source, s.line, s.index, s.dataset_id) for s in stored
    ] == [([1, 2, 3], [0, 1, 1], 1, "a", 1, 0, dataset_id), ([4, 5], [0, 0], 2, "b", 3, 1, dataset_id)]
    assert stored[0].extra == {"text": "x"} and stored[0].loss_coverage == pytest.approx(2 / 3)


def test_token_stats_by_reference(factory):
    with store.session_scope(factory) as session:
        run_id = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[0, 1, 2]
        )
        store.add_token_stats(
            session,
            run_id,
            [
                {"position": 1, "chunk": "hf0", "norm": 2.0, "reference": "run 2", "cosine": 0.5},
                {"position": 0, "chunk": "hf0", "norm": 1.0, "reference": "run 2", "cosine": 1.0},
                {
                    "position": 0,
                    "chunk": "hf0",
                    "norm": 1.0,
                    "reference": "wiring HF [0, 1, 2]",
                    "cosine": 1.0,
                },
            ],
        )
    with store.session_scope(factory) as session:
        assert store.token_stat_references(session, run_id) == ["run 2", "wiring HF [0, 1, 2]"]
        assert [r["position"] for r in store.get_token_stats(session, run_id, "run 2")] == [0, 1]
        store.delete_token_stats(session, run_id, "run 2")
    with store.session_scope(factory) as session:
        assert store.token_stat_references(session, run_id) == ["wiring HF [0, 1, 2]"]
        assert store.get_token_stats(session, run_id) == []  # reference None: the fed features' own norms
