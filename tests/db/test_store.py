"""The store: runs, steps (as StepRecord), datasets (as Sample), token stats; the database URL.
Every store test runs on SQLite and on a real PostgreSQL server (`any_db_url`)."""

from __future__ import annotations

import math

import pytest

from backend import BadInput
from backend.data.samples import Sample
from backend.run.records import StepRecord, StepTree
from db import schema, store


@pytest.fixture()
def factory(any_db_url):
    engine = store.make_engine(any_db_url)
    yield store.session_factory(engine)
    engine.dispose()


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
        tree=StepTree(
            tokens=drafted + [30],
            parents=[-1, 0, -1],
            scores=[0.5, 0.125, 0.25],
            depths=[1, 2, 1],
            accepted_path=[0, 1][:accepted],
            draws=[0.25, None, None],
            decisions=["accepted", "rejected", "unreached"],
        ),
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
            given=store.RunInput([1, 2, 3], "prompt"),
        )
        store.add_steps(session, run_id, [step(index, accepted) for index, accepted in enumerate([2, 0, 1])])
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
    assert [(r.id, r.step_count) for r in listed] == [(run_id, 3)]  # Runs and Home show verify steps
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


def test_bulk_inserts_land_whole_and_in_order(factory):
    """Samples in batches (600 > one batch of 256), hundreds of steps and thousands of token stats
    in one statement each; read back in order."""
    samples = (
        Sample([i, i + 1, i + 2], [0, 1, 1], 1, f"s{i % 7}", i + 1, {"text": f"t{i}"}) for i in range(600)
    )
    with store.session_scope(factory) as session:
        dataset_id, stored = store.create_dataset_streaming(
            session, name="bulk", path=None, format="jsonl", samples=samples
        )
        run_id = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params={"k": 2}, aux_hf_indices=[0]
        )
        store.add_steps(session, run_id, [step(i, i % 3) for i in range(300)])
        store.add_token_stats(
            session,
            run_id,
            [
                {"position": p, "chunk": f"hf{c}", "norm": float(p + c)}
                for p in range(1000)
                for c in (2, 4, 5)
            ],
        )
    assert stored == 600
    with store.session_scope(factory) as session:
        back = store.get_samples(session, dataset_id)
        steps = store.get_steps(session, run_id)
        stats = store.get_token_stats(session, run_id)
        (listed,) = store.list_datasets(session)
    assert listed.sample_count == 600 and [s.index for s in back] == list(range(600))
    assert back[599].input_ids == [599, 600, 601] and back[599].extra == {"text": "t599"}
    assert steps == [step(i, i % 3) for i in range(300)]
    assert len(stats) == 3000 and [(r["position"], r["chunk"]) for r in stats[:3]] == [
        (0, "hf2"),
        (0, "hf4"),
        (0, "hf5"),
    ]


def test_json_columns_keep_nesting_unicode_and_non_finite_floats(factory, any_db_url):
    """JSON round-trips nested lists and dicts and any text; NaN and infinities, which PostgreSQL's
    json refuses, are stored as null there instead of failing the run (SQLite keeps them)."""
    params = {"wiring": {"aux": [0, 2, 4], "source": "config ✓ «ü»"}, "none": None, "flag": True}
    metrics = {"mean_accept_length": 2.5, "nan": float("nan"), "inf": [float("inf"), 1.0]}
    with store.session_scope(factory) as session:
        run_id = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params=params, aux_hf_indices=[0]
        )
        store.finish_run(session, run_id, output_ids=[1, 2], metrics=metrics)
    with store.session_scope(factory) as session:
        run = store.get_run(session, run_id)
    assert run.params == params and run.metrics["mean_accept_length"] == 2.5
    if any_db_url.startswith("sqlite"):
        assert math.isnan(run.metrics["nan"]) and run.metrics["inf"] == [float("inf"), 1.0]
    else:
        assert run.metrics["nan"] is None and run.metrics["inf"] == [None, 1.0]


def test_postgresql_urls_open_through_psycopg_and_errors_hide_the_password():
    assert (
        schema.engine_url("postgresql://me@db.example/speclens")
        == "postgresql+psycopg://me@db.example/speclens"
    )
    assert schema.engine_url("postgres://me@db/s") == "postgresql+psycopg://me@db/s"
    assert schema.engine_url("postgresql+psycopg://me@db/s") == "postgresql+psycopg://me@db/s"
    assert schema.engine_url("sqlite:///x.db") == "sqlite:///x.db"
    from tests.support.postgres import free_port

    url = f"postgresql://me:s3cret@127.0.0.1:{free_port()}/speclens"  # nothing listens there
    with pytest.raises(
        BadInput, match=r"postgresql://me:\*\*\*@127.0.0.1:\d+/speclens: cannot open"
    ) as error:
        store.make_engine(url)
    assert "s3cret" not in str(error.value)


def test_text_from_users_has_no_length_limit(factory):
    """A dataset's name, a sample's source, a reference label and a server's version string are as
    long as their users make them (PostgreSQL enforces VARCHAR lengths; revision 0003)."""
    name, source, reference, version = "n" * 300, "s" * 500, "r" * 400, "v" * 100
    with store.session_scope(factory) as session:
        dataset_id = store.create_dataset(
            session, name=name, path=None, format="jsonl", samples=[Sample([1, 2], [0, 1], 1, source)]
        )
        run_id = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[0]
        )
        store.add_token_stats(
            session, run_id, [{"position": 0, "chunk": "hf0", "norm": 1.0, "reference": reference}]
        )
        store.add_observation(session, {"engine": "sglang", "source": "log", "version": version}, None, [])
    with store.session_scope(factory) as session:
        assert [d.name for d in store.list_datasets(session)] == [name]
        assert store.get_samples(session, dataset_id)[0].source == source
        assert store.token_stat_references(session, run_id) == [reference]
        assert store.list_observations(session)[0]["version"] == version
