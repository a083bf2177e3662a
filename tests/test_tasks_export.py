"""Background tasks (progress, failures, refused drafts) and run export (CSV, JSON, Parquet, CLI)."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from safetensors.torch import load_file

from backend import BadInput
from backend.synthetic import save_draft
from backend.tasks import MANAGER, PreflightRefused, load_pair, replay_work
from db import store
from db.export import ExportError, export_run


def test_task_reports_progress_result_and_errors():
    def work(progress):
        progress(0.5, "half")
        return {"answer": 42}

    done = MANAGER.wait(MANAGER.submit("test", "ok", work), 30)
    assert (done.status, done.progress, done.result) == ("done", 1.0, {"answer": 42})

    def bad(progress):
        raise BadInput("your file is wrong")

    failed = MANAGER.wait(MANAGER.submit("test", "bad input", bad), 30)
    assert failed.status == "failed" and failed.error == "your file is wrong"

    def crash(progress):
        raise RuntimeError("boom")

    crashed = MANAGER.wait(MANAGER.submit("test", "crash", crash), 30)
    assert crashed.status == "failed" and crashed.error.startswith("RuntimeError: boom")
    assert {t.label for t in MANAGER.list("test")} >= {"ok", "bad input", "crash"}


def test_refused_draft_carries_its_preflight_report(pairs, tmp_path):
    pair = pairs["random-L2"]
    tensors = load_file(pair.draft_dir / "model.safetensors")
    broken = save_draft(tmp_path / "broken", pair.config, {k: v for k, v in tensors.items() if k != "d2t"})
    with pytest.raises(PreflightRefused) as refused:
        load_pair(str(pair.target_dir), str(broken))
    assert refused.value.report["ok"] is False and "d2t" in str(refused.value)
    inconsistent = save_draft(tmp_path / "inconsistent", {**pair.config, "hidden_size": 999}, tensors)
    with pytest.raises(BadInput, match="inconsistent"):
        load_pair(str(pair.target_dir), str(inconsistent))

    task = MANAGER.wait(MANAGER.submit("replay", "refused", replay_work(None, str(pair.target_dir), str(broken),
                                                                        [1, 2, 3], 2, 4)), 60)
    assert task.status == "failed" and task.details["preflight"]["ok"] is False


@pytest.fixture()
def stored_run(pairs, tmp_path):
    pair = pairs["copy-L4-bigram"]
    url = f"sqlite:///{tmp_path / 'export.db'}"
    task = MANAGER.wait(MANAGER.submit("replay", "export", replay_work(url, str(pair.target_dir), str(pair.draft_dir),
                                                                       [1, 5, 9], 3, 12)), 120)
    assert task.status == "done", task.error
    return url, task.result["run_id"]


def test_export_formats_round_trip(stored_run, tmp_path):
    url, run_id = stored_run
    factory = store.session_factory(store.make_engine(url))
    with store.session_scope(factory) as session:
        steps = store.get_steps(session, run_id)
    csv = pd.read_csv(export_run(factory, run_id, "csv", tmp_path / "r.csv"))
    assert csv["accepted_count"].tolist() == [s.accepted_count for s in steps]
    assert [json.loads(v) for v in csv["drafted_ids"]] == [s.drafted_ids for s in steps]
    document = json.loads(export_run(factory, run_id, "json", tmp_path / "r.json").read_text())
    assert document["id"] == run_id and len(document["steps"]) == len(steps) and "mean_accept_length" in document["metrics"]
    parquet = pd.read_parquet(export_run(factory, run_id, "parquet", tmp_path / "r.parquet"))
    assert parquet["bonus_id"].tolist() == [s.bonus_id for s in steps]
    with pytest.raises(ExportError, match="no run"):
        export_run(factory, 999, "csv", tmp_path / "x.csv")


def test_cli_export(stored_run, tmp_path):
    url, run_id = stored_run
    out = tmp_path / "run.json"
    done = subprocess.run([sys.executable, "-m", "backend", "export", "--run", str(run_id), "--format", "json",
                           "--out", str(out), "--db", url, "--json"], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["out"] == str(out) and json.loads(out.read_text())["id"] == run_id
    missing = subprocess.run([sys.executable, "-m", "backend", "export", "--run", "999", "--format", "csv",
                              "--out", str(tmp_path / "x.csv"), "--db", url], capture_output=True, text=True)
    assert missing.returncode == 2 and "no run 999" in missing.stderr
