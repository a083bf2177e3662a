"""Runs page: the history with a draft filter and delete; a failed run shows its error."""

from __future__ import annotations

import pytest

from tests.support.pages import frame_with, ok, page

pytestmark = pytest.mark.slow


def test_runs_filter_and_delete(db):
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.engine.request import ReplayRequest
    from backend.service.datasets import ensure_demo_dataset, get_samples
    from backend.service.jobs import run_replay
    from backend.service.runs import list_runs

    sample = get_samples(db, ensure_demo_dataset(db))[0]
    for name in ("epoch1", "final"):
        run_replay(
            ReplayRequest(
                str(DEMO_TARGET),
                str(DEMO_DRAFTS / name),
                prompt_ids=tuple(sample.prompt_ids),
                max_new_tokens=16,
                sample_ref="dataset 1 #0",
                sample_id=sample.id,
            ),
            db,
        )
    runs = ok(page("5_Runs").run())
    table = frame_with(runs, "acceptance rate")
    assert len(table) == 2
    # issue 43 row 9: target and speed columns, the sample by its dataset's name, labelled details
    from backend.service.datasets import list_datasets

    name = next(d.name for d in list_datasets(db) if d.id == 1)
    assert set(table["target"]) == {"demo/target"} and table["tokens/s"].notna().all()
    assert all(value.startswith(f"{name} #0") for value in table["sample"])
    runs.text_input(key="runs_filter_sample").set_value(name[:5]).run()
    assert len(frame_with(runs, "acceptance rate")) == 2
    facts = frame_with(runs, "what")
    assert {"target", "draft", "sample", "wall"} <= set(facts["what"])
    picker = next(box for box in runs.selectbox if box.label == "Run")
    assert picker.format_func(picker.value).startswith("run ")
    runs.text_input(key="runs_filter_sample").set_value("").run()
    runs.multiselect(key="runs_filter_draft").set_value(["epoch1"]).run()
    assert len(frame_with(runs, "acceptance rate")) == 1
    ok(runs.button(key="runs_delete").click().run())
    assert [r.draft_path for r in list_runs(db)] == [str(DEMO_DRAFTS / "final")]


def test_runs_page_shows_a_failed_runs_error(db):
    from db import store

    factory = store.session_factory(store.make_engine(db))
    with store.session_scope(factory) as session:
        run_id = store.create_run(
            session,
            kind="replay",
            target_path="demo/target",
            draft_path="x",
            params={},
            aux_hf_indices=[2, 4, 5],
        )
        store.fail_run(session, run_id, error="RuntimeError: the GPU fell over\ntraceback...")
    app = ok(page("5_Runs").run())
    assert "the GPU fell over" in app.error[0].value
