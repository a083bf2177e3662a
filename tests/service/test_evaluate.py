"""`evaluate`: a dataset replayed for several drafts, resumable, summed up per draft; the same on
a local Ray cluster, with a worker killed mid-way."""

from __future__ import annotations

import pytest

from backend.defaults import DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET

pytestmark = pytest.mark.slow  # each replays the demo pair several times

SETTINGS = {"num_steps": 2, "max_new_tokens": 12}
COMPARED = (
    "runs",
    "mean_accept_length",
    "pooled_accept_length",
    "per_position_marginal",
    "verify_steps",
    "tokens",
)


def plan(samples: int = 2):
    from backend.data.samples import read_jsonl
    from backend.service.eval_pairs import Plan

    valid, _ = read_jsonl(DEMO_EVAL)
    for index, sample in enumerate(valid):
        sample.index = index
    drafts = [str(DEMO_DRAFTS / "final"), str(DEMO_DRAFTS / "epoch1")]
    from backend.run.request import ReplayRequest

    template = ReplayRequest(str(DEMO_TARGET), drafts[0], prompt_ids=tuple(valid[0].prompt_ids), **SETTINGS)
    return Plan(template, drafts, valid[:samples], str(DEMO_EVAL), {d: d[-6:] for d in drafts})


def numbers(result: dict) -> list[dict]:
    return [
        {k: d[k] for k in COMPARED} | {"worst": [(w["sample"], w["accept_length"]) for w in d["worst"]]}
        for d in result["drafts"]
    ]


def test_local_evaluation_stores_every_pair_and_resumes(tmp_path):
    from backend.run.metrics import mean_ci95
    from backend.service.evaluate import evaluate, table
    from backend.service.runs import list_runs

    db = f"sqlite:///{tmp_path / 'eval.db'}"
    first = evaluate(db, plan())
    assert (first["replayed"], first["reused"]) == (4, 0) and len(list_runs(db)) == 4
    final, epoch1 = first["drafts"]
    assert final["runs"] == 2 and final["mean_accept_length"] > epoch1["mean_accept_length"] >= 1.0
    for draft in first["drafts"]:
        lengths = [r["accept_length"] for r in draft["per_sample"]]
        assert draft["mean_accept_length"] == pytest.approx(sum(lengths) / len(lengths))
        assert draft["mean_accept_length_ci95"] == pytest.approx(mean_ci95(lengths))  # its spread beside it
        assert draft["worst"][0]["accept_length"] == min(lengths) and len(draft["per_position_marginal"]) == 2
    again = evaluate(db, plan())  # resumed: nothing replayed, the same table
    assert (again["replayed"], again["reused"]) == (0, 4) and len(list_runs(db)) == 4
    assert numbers(again) == numbers(first)
    assert "mean AL | 95% CI" in table(first).splitlines()[0] and len(table(first).splitlines()) == 4


def test_evaluate_cli(tmp_path):
    from tests.support.cli import cli_json, run_cli

    db = f"sqlite:///{tmp_path / 'cli.db'}"
    command = ["evaluate", "--samples", str(DEMO_EVAL), "--limit", "1"]
    command += ["--draft", str(DEMO_DRAFTS / "final"), "--steps", "2", "--max-new-tokens", "8", "--db", db]
    result = cli_json(*command)
    assert result["samples"] == 1 and result["drafts"][0]["runs"] == 1 and result["replayed"] == 1
    # issue 55: where the draft lost acceptance over the evaluation's runs, the `lost` view's JSON
    (lost,) = result["where_lost"]["drafts"]
    assert lost["name"] == "final" and lost["runs"] == 1
    assert [p["marginal"] for p in lost["by_position"]] == result["drafts"][0]["per_position_marginal"]
    bad = run_cli(*command[:2], str(tmp_path / "missing.jsonl"), "--db", db)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "missing.jsonl" in bad.stderr


def test_ray_gives_the_local_numbers_and_a_killed_worker_loses_nothing(tmp_path, postgres_url):
    """Two Ray workers (ray.init(num_cpus=2)) writing to one PostgreSQL database, one of them killed
    while it replays: every pair still ends as a finished run, with the single-process numbers."""
    ray = pytest.importorskip("ray")
    from backend.service.evaluate import Where, evaluate
    from backend.service.runs import list_runs

    local = evaluate(f"sqlite:///{tmp_path / 'local.db'}", plan(3))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    killed = []

    def kill_a_busy_worker(state):
        if not killed and state["busy"]:
            actor = next(iter(state["busy"]))
            ray.kill(actor)
            killed.append(state["busy"][actor])

    try:
        db = postgres_url
        spread = evaluate(db, plan(3), where=Where(ray="local"), hook=kill_a_busy_worker)
        again = evaluate(db, plan(3), where=Where(ray="local"))  # the CLI path: all stored, nothing to replay
    finally:
        ray.shutdown()
    assert killed, "no worker was busy after the first pair: nothing was killed"
    assert spread["workers"] == 3 and spread["retried"] == 1 and spread["replayed"] == 6  # 2 + 1 replacement
    assert numbers(spread) == numbers(local)
    finished = [r for r in list_runs(db) if r.status == "finished"]
    assert len(finished) == 6  # every pair, the killed worker's one included (retried elsewhere)
    assert (again["replayed"], again["reused"], again["ray"]) == (0, 6, "local") and numbers(
        again
    ) == numbers(local)


def test_a_ray_address_with_nothing_listening_fails_in_bounded_time():
    """Ray's own connect retries without end; the wait is bounded and names the address."""
    import socket
    import time

    from backend import BadInput
    from backend.service.ray_eval import wait_for_listener

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # a port nothing listens on
    started = time.monotonic()
    with pytest.raises(BadInput, match=rf"Ray cluster 127.0.0.1:{port}: nothing answers .* after 1 s"):
        wait_for_listener(f"127.0.0.1:{port}", 1.0)
    # bounded, not fast: the wait ends (Ray's own retries never do); the margin holds on any machine
    assert time.monotonic() - started < 60
    wait_for_listener("local", 0.1)  # Ray's own forms are left to Ray
