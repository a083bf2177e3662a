"""Run export: the steps as CSV or Parquet, the whole run as JSON; all read back as stored."""

from __future__ import annotations

import json

import pytest


def test_export_formats_round_trip(stored_run, tmp_path):
    import pandas as pd

    from db import store
    from db.export import ExportError, export_run

    url, run_id = stored_run
    factory = store.session_factory(store.make_engine(url))
    with store.session_scope(factory) as session:
        steps = store.get_steps(session, run_id)
    csv = pd.read_csv(export_run(factory, run_id, "csv", tmp_path / "r.csv"))
    assert csv["accepted_count"].tolist() == [s.accepted_count for s in steps]
    assert [json.loads(v) for v in csv["drafted_ids"]] == [s.drafted_ids for s in steps]
    assert csv["drafted_count"].tolist() == [len(s.drafted_ids) for s in steps]
    document = json.loads(export_run(factory, run_id, "json", tmp_path / "r.json").read_text())
    assert (
        document["id"] == run_id
        and len(document["steps"]) == len(steps)
        and "mean_accept_length" in document["metrics"]
    )
    assert "aux_features" not in document["steps"][0] and document["created_at"]
    parquet = pd.read_parquet(export_run(factory, run_id, "parquet", tmp_path / "sub" / "r.parquet"))
    assert parquet["bonus_id"].tolist() == [s.bonus_id for s in steps]
    with pytest.raises(ExportError, match="no run"):
        export_run(factory, 999, "csv", tmp_path / "x.csv")
    with pytest.raises(ExportError, match="unknown format"):
        export_run(factory, run_id, "xlsx", tmp_path / "x.xlsx")
