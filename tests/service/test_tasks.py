"""Background tasks: progress, results and failures; a refused draft carries its preflight report;
the jobs pages start run against the service with plain values."""

from __future__ import annotations

import pytest

from backend import BadInput
from backend.service.tasks import MANAGER, FailureDetails


def test_task_reports_progress_result_and_errors():
    def work(progress):
        progress(0.5, "half")
        return {"answer": 42}

    done = MANAGER.wait(MANAGER.submit("test", "ok", work), 30)
    assert (done.status, done.progress, done.result) == ("done", 1.0, {"answer": 42})
    assert done.message == "half" and done.finished is not None and not done.active

    def bad(progress):
        raise BadInput("your file is wrong")

    failed = MANAGER.wait(MANAGER.submit("test", "bad input", bad), 30)
    assert failed.status == "failed" and failed.error == "your file is wrong"
    assert failed.details == FailureDetails()

    def crash(progress):
        raise RuntimeError("boom")

    crashed = MANAGER.wait(MANAGER.submit("test", "crash", crash), 30)
    assert crashed.status == "failed" and crashed.error.startswith("RuntimeError: boom")
    assert {t.label for t in MANAGER.list("test")} >= {"ok", "bad input", "crash"}
    assert MANAGER.get(None) is None and MANAGER.get("no-such-task") is None


def test_progress_is_clamped_and_wait_times_out():
    import threading

    release = threading.Event()

    def slow(progress):
        progress(7.0, "too far")
        release.wait(30)
        return None

    task_id = MANAGER.submit("test", "slow", slow)
    with pytest.raises(TimeoutError):
        MANAGER.wait(task_id, 0.3)
    running = MANAGER.get(task_id)
    assert running.status == "running" and running.progress == 1.0 and running.message == "too far"
    release.set()
    assert MANAGER.wait(task_id, 30).status == "done"


def test_refused_draft_carries_its_preflight_report(pairs, tmp_path, db_url):
    from safetensors.torch import load_file

    from backend.run.request import ReplayRequest
    from backend.service.tasks import start_replay
    from tests.support.synthetic import save_draft

    pair = pairs["random-L2"]
    tensors = load_file(pair.draft_dir / "model.safetensors")
    broken = save_draft(tmp_path / "broken", pair.config, {k: v for k, v in tensors.items() if k != "d2t"})
    request = ReplayRequest(
        str(pair.target_dir), str(broken), prompt_ids=(1, 2, 3), num_steps=2, max_new_tokens=4
    )
    task = MANAGER.wait(start_replay(db_url, request), 60)
    report = task.details.preflight  # the worker's JSON read back typed
    assert task.status == "failed" and report.ok is False
    assert "failed preflight" in task.error and "d2t" in task.error
    assert any(c.name == "d2t" and c.status == "fail" for c in report.checks)


def test_start_replay_stores_a_run(pairs, db_url):
    from backend.run.request import ReplayRequest
    from backend.service.runs import get_run
    from backend.service.tasks import start_replay

    pair = pairs["copy-L4-bigram"]
    request = ReplayRequest(
        str(pair.target_dir),
        str(pair.draft_dir),
        prompt_ids=(1, 5, 9),
        num_steps=3,
        max_new_tokens=12,
        sample_ref="prompt",
    )
    task = MANAGER.wait(start_replay(db_url, request), 120)
    assert task.status == "done", task.error
    assert task.kind == "replay" and task.label == request.label
    result = task.result
    assert (result.reference, result.reference_note) == (None, None)  # no reference was asked
    assert type(result).from_dict(result.to_dict()) == result
    run = get_run(db_url, result.run_id)
    assert run.status == "finished" and run.metrics["mean_accept_length"] == result.mean_accept_length


def test_compare_puts_a_chain_and_a_tree_of_the_same_draft_side_by_side(pairs, db_url):
    from dataclasses import replace

    from backend.data.samples import Sample
    from backend.run.request import ReplayRequest
    from backend.service.runs import get_run
    from backend.service.tasks import Comparison, start_compare

    pair = pairs["copy-L4-bigram"]
    sample = Sample(
        input_ids=[1, 5, 9, 3], loss_mask=[0, 0, 1, 1], prompt_len=2, id=None, index=0, source="unit"
    )
    side = ReplayRequest(
        str(pair.target_dir), str(pair.draft_dir), prompt_ids=(1, 5), num_steps=3, max_new_tokens=12
    )
    tree = replace(side, topk=4, num_draft_tokens=8)
    task = MANAGER.wait(start_compare(db_url, Comparison(side, tree, [sample], 1)), 120)
    assert task.status == "done", task.error
    (row,) = task.result.rows
    assert (task.result.reused, task.result.replayed) == (0, 2)
    written = task.result.to_dict()  # the table's columns, as the page shows them
    columns = ["sample #", "source", "run A", "AL A", "run B", "AL B", "AL delta (B - A)"]
    assert list(written["rows"][0]) == columns and type(task.result).from_dict(written).to_dict() == written
    assert written["drafts"] == dict.fromkeys("AB", str(pair.draft_dir)) and written["ray"] is None
    chain, tree = get_run(db_url, row.run_a), get_run(db_url, row.run_b)
    assert (chain.params["topk"], tree.params["topk"], tree.params["num_draft_tokens"]) == (1, 4, 8)
    assert chain.output_ids == tree.output_ids  # both equal the target's greedy output
    with pytest.raises(BadInput, match="topk > 1 needs"):  # a side's bad setting: refused as it is made
        replace(side, topk=4)


def compare_on(pairs, db_url, samples, max_new=10, reuse=True, decoding_b=None):
    """start_compare of copy-L4-bigram's draft against itself (K=3), waited for."""
    from dataclasses import replace

    from backend.run.request import ReplayRequest
    from backend.service.tasks import Comparison, start_compare

    pair = pairs["copy-L4-bigram"]
    target, draft = str(pair.target_dir), str(pair.draft_dir)
    side = ReplayRequest(
        target, draft, prompt_ids=tuple(samples[0].prompt_ids), num_steps=3, max_new_tokens=max_new
    )
    other = replace(side, **(decoding_b or {}))
    task = MANAGER.wait(start_compare(db_url, Comparison(side, other, samples, 1, reuse=reuse)), 120)
    assert task.status == "done", task.error
    return task.result


def unit_samples():
    from backend.data.samples import Sample

    return (
        Sample(input_ids=[1, 5, 9, 3], loss_mask=[0, 0, 1, 1], prompt_len=2, index=0, source="unit"),
        Sample(input_ids=[2, 7, 4, 3], loss_mask=[0, 0, 1, 1], prompt_len=2, index=1, source="unit"),
    )


def test_compare_reuses_a_finished_run_instead_of_replaying_it(pairs, db_url):
    from backend.service.runs import list_runs

    one, _ = unit_samples()
    first = compare_on(pairs, db_url, [one], max_new=6)
    assert (first.reused, first.replayed) == (1, 1)  # B asks for the run A just stored
    (row,) = first.rows
    assert row.run_a == row.run_b and row.al_delta == 0
    again = compare_on(pairs, db_url, [one], max_new=6)
    assert (again.reused, again.replayed) == (2, 0) and again.rows == first.rows
    assert len(list_runs(db_url)) == 1


def test_compare_reuses_only_runs_of_the_same_sample_and_settings(pairs, db_url):
    from backend.service.runs import list_runs

    one, two = unit_samples()
    tree = {"topk": 2, "num_draft_tokens": 4}
    first = compare_on(pairs, db_url, [one], decoding_b=tree)
    assert (first.reused, first.replayed) == (0, 2)
    again = compare_on(pairs, db_url, [one, two], decoding_b=tree)
    assert (again.reused, again.replayed) == (2, 2)  # sample one's pair is reused, two's replayed
    (row_one,) = [r for r in again.rows if r.sample == 0]
    assert (row_one.run_a, row_one.run_b) == (first.rows[0].run_a, first.rows[0].run_b)
    chains = compare_on(pairs, db_url, [two])  # A and B both ask for the chain already stored
    assert (chains.reused, chains.replayed) == (2, 0)
    longer = compare_on(pairs, db_url, [two], max_new=11)  # another limit is another run (B reuses A's)
    assert (longer.reused, longer.replayed) == (1, 1)
    assert compare_on(pairs, db_url, [two], reuse=False).replayed == 2  # asked not to reuse
    assert len(list_runs(db_url)) == 4 + 1 + 2


def test_diagnostic_tasks_use_the_declared_wiring_after_an_override(bigram_setup, db_url):
    """A wiring override belongs to one request: a probe of the same draft afterwards still starts
    from the draft's declared wiring, even though the draft stays loaded."""
    from backend.run.request import ReplayRequest
    from backend.service import models
    from backend.service.tasks import start_agreement, start_probe, start_replay

    root, samples = bigram_setup.root, bigram_setup.samples
    target, draft = str(root / "target"), str(root / "miswired")
    models.forget()
    override = ReplayRequest(
        target,
        draft,
        prompt_ids=tuple(samples[0].prompt_ids),
        num_steps=2,
        max_new_tokens=8,
        aux_hf_indices=(0, 2, 4),
        record=False,
    )
    assert MANAGER.wait(start_replay(db_url, override), 120).status == "done"
    probe = MANAGER.wait(start_probe(target, draft, samples, 2, 0, 0), 120)
    assert probe.status == "done", probe.error
    assert list(probe.result.declared.aux_hf_indices) == [2, 4, 5] and not probe.result.confirmed
    agreement = MANAGER.wait(start_agreement(target, draft, samples[:1], 2, 16, (0, 2, 4)), 120)
    assert agreement.status == "done", agreement.error
    assert set(agreement.result.to_dict()) == {"rows", "summary", "definition"}
    (row,) = agreement.result.rows
    assert row.flagged  # trained on (0, 2, 4), served the declared (2, 4, 5)
    refused = MANAGER.wait(start_agreement(target, draft, samples[:1], 2, 16, (0, 2, 40)), 120)
    assert refused.status == "failed" and "out of range" in refused.error


def test_doctor_and_train_vs_serve_tasks(bigram_setup, tmp_path):
    import torch

    from backend.engine.teacher import target_pass
    from backend.service.tasks import start_doctor, start_train_vs_serve
    from tests.support.models import TRAINED

    root, target, samples = bigram_setup.root, bigram_setup.target, bigram_setup.samples
    doctor = MANAGER.wait(start_doctor(str(root / "target"), str(root / "right"), samples, None), 120)
    assert doctor.status == "done" and doctor.result.preflight.ok and doctor.result.coverage is not None
    ids = samples[0].input_ids
    passed = target_pass(target, ids, samples[0].loss_mask, TRAINED)
    path = tmp_path / "data_0.ckpt"
    torch.save({"input_ids": torch.tensor(ids), "aux_hidden_state": passed.features(TRAINED)[None]}, path)
    diff = MANAGER.wait(start_train_vs_serve(str(root / "target"), str(root / "miswired"), str(path)), 120)
    assert diff.status == "done", diff.error
    result = diff.result
    assert result.serving_aux_hf_indices == [2, 4, 5] and result.training_aux_hf_indices == TRAINED
    assert result.input_ids == ids and result.first_mismatch.position == 0


def test_the_worker_starts_ahead_and_has_the_model_stack_before_its_first_job():
    """The dashboard starts the worker with the server (ui/state.py sidebar): the worker imports
    torch, transformers and the job code before it takes a job, and the started one runs the jobs."""
    from backend.service.worker import WORKER
    from tests.support import jobs

    WORKER.prestart()
    worker = WORKER.pid
    assert worker is not None and worker != __import__("os").getpid()
    stack = ["torch", "transformers", "backend.service.jobs"]
    task = MANAGER.wait(MANAGER.submit_job("test", "modules", jobs.loaded, stack), 120)
    assert task.result == dict.fromkeys(stack, True) and WORKER.pid == worker


def test_a_page_never_waits_for_a_running_job_to_prestart_the_worker():
    """Every page prestarts the workers (ui/state.py sidebar). While a job runs it holds the worker;
    a page opened then (a reload during a long replay) must not wait for the job to end."""
    import threading
    import time

    from backend.run.records import no_progress
    from backend.service.worker import WORKER
    from tests.support import jobs

    WORKER.prestart()
    job = threading.Thread(target=WORKER.run, args=(jobs.sleep, (3.0,), {}, no_progress))
    job.start()
    time.sleep(0.5)  # the job holds the worker now
    started = time.perf_counter()
    WORKER.prestart()
    waited = time.perf_counter() - started
    job.join()
    assert waited < 1.0, f"prestart waited {waited:.1f} s for the running job"


@pytest.mark.slow  # spawns a worker process
def test_a_worker_that_cannot_import_the_model_stack_says_so_for_each_job(tmp_path, monkeypatch):
    from backend.run.records import no_progress
    from backend.service.worker import JobFailed, Worker
    from tests.support import jobs

    planted = tmp_path / "transformers"
    planted.mkdir()
    (planted / "__init__.py").write_text("raise ImportError('planted: no transformers here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the spawned worker gets this sys.path
    worker = Worker()
    try:
        for _ in range(2):
            with pytest.raises(JobFailed, match="cannot import the model stack: ImportError: planted"):
                worker.run(jobs.answer, (1,), {}, no_progress)
    finally:
        worker.stop()


@pytest.mark.slow  # spawns and kills worker processes
def test_a_job_that_kills_or_starves_its_worker_fails_alone():
    """Model jobs run in a worker process: a job that dies (SIGKILL, like the kernel's OOM killer) or
    exhausts a memory limit fails with a message, and the next job runs in a fresh or the same worker."""
    from backend.service.worker import WORKER
    from tests.support import jobs

    first = MANAGER.wait(MANAGER.submit_job("test", "answer", jobs.answer, 41), 120)
    assert (first.status, first.result) == ("done", 41)
    worker = WORKER.pid
    assert worker is not None and worker != __import__("os").getpid()
    died = MANAGER.wait(MANAGER.submit_job("test", "die", jobs.die), 120)
    assert (
        died.status == "failed" and "died with exit code -9" in died.error and "out of memory?" in died.error
    )
    starved = MANAGER.wait(MANAGER.submit_job("test", "memory", jobs.exhaust_memory, 2 * 1024**3), 120)
    assert starved.status == "failed" and starved.error.startswith("MemoryError")
    after = MANAGER.wait(MANAGER.submit_job("test", "answer again", jobs.answer, 42), 120)
    assert (after.status, after.result) == ("done", 42) and WORKER.pid not in (None, worker)
