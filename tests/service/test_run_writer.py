"""The job runner's batched writes: one plain-SQL batch stores what the ORM functions store, a
deleted run takes nothing, the artifact written from memory is the one the parts merge into, and
token statistics computed per batch are the per-record numbers."""

from __future__ import annotations

import pytest


def _step(index: int):
    from backend.run.records import StepRecord, StepTree

    return StepRecord(
        index,
        10 + 3 * index,
        5,
        [1, 2, 3],
        index % 4,
        7,
        [1, 2, 7][: index % 4 + 1],
        [1, 2, 9, 4],
        1.5,
        2.5,
        draft_probs=[0.5, 0.25, float("nan")],
        draft_top_ids=[[1, 4], [2, 5], [3, 6]],
        draft_top_probs=[[0.5, 0.2], [0.25, 0.2], [0.1, 0.05]],
        target_argmax_probs=[0.9, 0.8, 0.7, 0.6],
        tree=StepTree([1, 2, 3], [-1, 0, 1], decisions=["accepted", "rejected", "unreached"]),
    )


def test_a_batch_stores_what_the_orm_functions_store(any_db_url):
    from sqlalchemy import text

    from db import store

    factory = store.session_factory(store.make_engine(any_db_url))
    steps = [_step(i) for i in range(5)]
    stats = [{"position": p, "chunk": f"hf{c}", "norm": p + c / 10} for p in range(4) for c in (0, 2)]
    runs = []
    for batched in (False, True):
        with store.session_scope(factory) as session:
            run_id = store.create_run(
                session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[0, 2]
            )
        with store.session_scope(factory) as session:
            if batched:
                assert store.write_run_batch(session, run_id, steps, stats, [4, 1, 2])
            else:
                store.add_steps(session, run_id, steps)
                store.add_token_stats(session, run_id, stats)
        runs.append(run_id)
    with store.session_scope(factory) as session:
        orm, batch = (store.get_run(session, r) for r in runs)
        assert batch.output_ids == [4, 1, 2] and batch.step_count == orm.step_count == 5
        assert batch.heartbeat_at >= orm.created_at
        orm_steps, batch_steps = (store.get_steps(session, r) for r in runs)
        assert repr(batch_steps) == repr(orm_steps)  # NaN compares unequal to itself; its repr does not
        assert store.get_token_stats(session, runs[1]) == store.get_token_stats(session, runs[0])
        store.delete_run(session, runs[1], force=True)
    with store.session_scope(factory) as session:  # the run is gone: nothing is written
        assert not store.write_run_batch(session, runs[1], steps, stats, [1])
    with store.session_scope(factory) as session:
        count = session.execute(text("select count(*) from steps where run_id = :r"), {"r": runs[1]})
        assert count.scalar() == 0
        assert store.get_token_stats(session, runs[1]) == []


def test_the_artifact_from_memory_is_the_merged_parts_and_stats_are_per_record(tmp_path):
    import torch

    from backend.run.records import PrefillRecord, StepRecord
    from backend.service.run_tensors import RunTensors, chunk_norms, merge_parts

    generator = torch.Generator().manual_seed(0)
    indices = (0, 2, 4)
    records = [PrefillRecord([1, 2, 3], 4, 1.0, torch.randn(3, 12, generator=generator))]
    position = 3
    for index in range(7):
        rows = 1 + index % 3
        records.append(
            StepRecord(
                index, position, 1, [1, 2], 1, 2, [1, 2][:rows], [1, 2, 3], 0.0, 0.0,
                aux_features=torch.randn(rows, 12, generator=generator),
                draft_hidden=torch.randn(2, 4, generator=generator),
            )
        )  # fmt: skip
        position += rows
    batched = RunTensors(tmp_path, 1, indices)  # statistics per batch, computed at the writer's commit
    expected, got = [], []
    for number, record in enumerate(records):
        first = getattr(record, "position", 0)  # the prefill's rows start at position 0
        expected += chunk_norms(record.aux_features, first, indices)  # record by record
        batched.add(record)
        if number in (2, 5):
            got += batched.pending_stats()
            batched.flush()
    got += batched.pending_stats()
    assert got == expected
    assert expected[0] == {
        "position": 0,
        "chunk": "hf0",
        "norm": pytest.approx(float(records[0].aux_features[0, :4].norm())),
    }
    by_chunk = torch.stack([c.norm(dim=-1) for c in records[3].aux_features.chunk(3, dim=-1)], dim=-1)
    assert [
        row["norm"] for row in chunk_norms(records[3].aux_features, 9, indices)
    ] == by_chunk.flatten().tolist()

    parts = tmp_path / "1" / "parts"
    assert len(list(parts.glob("*.safetensors"))) == 2
    batched.flush()  # what merge_parts would find after a crash now
    from db.artifacts import read_artifact

    merged_from_parts = read_artifact(merge_parts(parts)["artifact_path"])
    again = RunTensors(tmp_path, 2, indices)
    for record in records:
        again.add(record)
        if record is records[4]:
            again.flush()
    artifact = again.save()
    from_memory = read_artifact(artifact["artifact_path"], artifact["artifact_sha256"])
    assert sorted(from_memory) == sorted(merged_from_parts)
    assert all(torch.equal(from_memory[name], merged_from_parts[name]) for name in from_memory)
    assert not (tmp_path / "2" / "parts").exists()
