"""Batched replays stored as runs (backend/service/batch_jobs.py): each run of a batch is the run its
sample makes alone, says it was batched, and a batch stopped part way keeps the samples that finished."""

from __future__ import annotations

import pytest

from backend import Terminated


def _requests(pair, count: int, tokens: int = 14) -> list:
    import torch

    from backend.run.request import ReplayRequest

    generator = torch.Generator().manual_seed(5)
    return [
        ReplayRequest(
            str(pair.target_dir),
            str(pair.draft_dir),
            prompt_ids=tuple(
                torch.randint(1, pair.target.vocab_size, (2 + 3 * i,), generator=generator).tolist()
            ),
            num_steps=3,
            max_new_tokens=tokens + 4 * i,  # samples end at different steps
        )
        for i in range(count)
    ]


def test_a_batch_stores_the_runs_each_sample_makes_alone(pairs, tmp_path):
    from backend.service.batch_jobs import run_in_batches
    from backend.service.runs import get_run_with_steps

    requests = _requests(pairs["copy-L5-context"], 4)
    alone = run_in_batches(requests, f"sqlite:///{tmp_path / 'alone.db'}", batch=1)
    batched_db = f"sqlite:///{tmp_path / 'batched.db'}"
    batched = run_in_batches(requests, batched_db, batch=3)  # a batch of 3, then one of 1
    for one, many in zip(alone, batched, strict=True):
        assert one.output_ids == many.output_ids
        assert [s.accepted_count for s in one.steps] == [s.accepted_count for s in many.steps]
        stored, steps = get_run_with_steps(batched_db, many.run_id)
        assert stored.status == "finished" and stored.output_ids == one.output_ids
        assert [s.drafted_ids for s in steps] == [s.drafted_ids for s in one.steps]
        assert stored.metrics["mean_accept_length"] == one.metrics.mean_accept_length
    assert [o.metrics.batch_size for o in batched] == [3, 3, 3, None]
    assert all(o.metrics.batch_size is None for o in alone)
    # the lint's K comes from a run's own step times: never a batched run's shares of a batch forward
    from backend.service.serving_lint import whatif_best_k

    draft, only_batched = requests[0].draft, f"sqlite:///{tmp_path / 'only_batched.db'}"
    run_in_batches(requests[:2], only_batched, batch=2)
    assert whatif_best_k(only_batched, draft) is None
    assert whatif_best_k(f"sqlite:///{tmp_path / 'alone.db'}", draft) is not None


def test_a_batch_stopped_part_way_keeps_the_samples_that_finished(pairs, tmp_path):
    from backend.service import jobs
    from backend.service.batch_jobs import run_in_batches
    from backend.service.runs import get_run_with_steps, list_runs

    db_url = f"sqlite:///{tmp_path / 'stopped.db'}"
    requests = _requests(pairs["copy-L4-bigram"], 3, tokens=6)

    def stop_after_the_first(fraction: float, message: str) -> None:
        if "1/3 samples done" in message:
            jobs.STOP.set()

    with pytest.raises(Terminated):
        run_in_batches(requests, db_url, batch=3, progress=stop_after_the_first)
    runs = sorted(list_runs(db_url), key=lambda r: r.id)
    assert [r.status for r in runs] == ["finished", "interrupted", "interrupted"]
    for run in runs[1:]:  # what each had when stopped is kept
        stored, steps = get_run_with_steps(db_url, run.id)
        assert steps and stored.metrics["batch_size"] == 3
