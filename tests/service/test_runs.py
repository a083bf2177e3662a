"""Stored runs for the pages and the CLI: list, read with steps, files, export, delete."""

from __future__ import annotations

import json

import pytest

from backend import BadInput


def test_list_read_export_and_delete(stored_run, tmp_path):
    from backend.service import runs

    url, run_id = stored_run
    (listed,) = runs.list_runs(url)
    run, steps = runs.get_run_with_steps(url, run_id)
    assert listed.id == run.id == run_id and run.status == "finished" and len(steps) == run.step_count > 0
    assert runs.get_run(url, run_id).output_ids == run.output_ids
    assert {r["chunk"] for r in runs.token_stats(url, run_id)} == {f"hf{i}" for i in run.aux_hf_indices}
    assert runs.token_stat_references(url, run_id) == []
    document = json.loads(runs.run_file(run, steps, "json"))
    assert document["id"] == run_id and [s["bonus_id"] for s in document["steps"]] == [
        s.bonus_id for s in steps
    ]
    assert runs.run_file(run, steps, "csv").decode().startswith("step_index,")
    assert runs.run_file(run, steps, "parquet")[:4] == b"PAR1"
    out = runs.export(url, run_id, "json", tmp_path / "run.json")
    assert json.loads(out.read_text())["id"] == run_id
    with pytest.raises(BadInput, match="no run 999"):
        runs.export(url, 999, "csv", tmp_path / "x.csv")
    with pytest.raises(BadInput, match="unknown format"):
        runs.export(url, run_id, "xml", tmp_path / "x.xml")
    assert runs.delete_run(url, run_id) and not runs.delete_run(url, run_id)
    assert runs.get_run(url, run_id) is None and runs.get_run_with_steps(url, run_id) == (None, [])
