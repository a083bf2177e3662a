"""Runs page: the history with a draft filter and delete; a failed run shows its error."""

from __future__ import annotations

import pytest

from tests.support.pages import frame_with, ok, page

pytestmark = pytest.mark.slow


def test_runs_filter_and_delete(db):
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.run.request import ReplayRequest
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
    picked = next(box for box in runs.selectbox if box.label == "Run").value
    runs.checkbox(key=f"runs_delete_sure_{picked}").check().run()
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


def test_where_lost_over_two_drafts_runs(db):
    """Issue 55: the Where-lost page over the stored runs of two drafts on the demo dataset: the
    position chart and the splits drawn per draft, a small group labelled too few to judge, and the
    numbers those charts draw are the service's (checked independently in tests/diagnostics)."""
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.run.request import ReplayRequest
    from backend.service.datasets import ensure_demo_dataset, get_samples
    from backend.service.jobs import run_replay

    dataset = ensure_demo_dataset(db)
    for sample in get_samples(db, dataset)[:3]:
        for name in ("final", "miswired"):
            request = ReplayRequest(
                str(DEMO_TARGET),
                str(DEMO_DRAFTS / name),
                prompt_ids=tuple(sample.prompt_ids),
                max_new_tokens=24,
                sample_id=sample.id,
            )
            run_replay(request, db)
    app = page("6_Where_lost")
    app.session_state["global_target"] = str(DEMO_TARGET)
    app = ok(app.run())
    assert set(app.multiselect(key="lost_drafts").value) == {"final", "miswired"}
    heads = [s.value for s in app.subheader]
    assert (
        heads[:2] == ["By draft position", "By token kind"]
        and "Calibration and a confidence threshold" in heads
    )
    assert any("final: 3 runs" in c.value and "miswired: 3 runs" in c.value for c in app.caption)
    assert [b.label for b in app.get("download_button")] == [
        "Download the tables (CSV)",
        "Download the tables (PARQUET)",
    ]
    rejected = frame_with(app, "target's token")
    assert set(rejected["draft"]) <= {"final", "miswired"} and (rejected["rejections"] > 0).all()
    threshold = frame_with(app, "stop drafting below")
    assert "as run" in set(threshold["stop drafting below"])
    # one draft, one dataset: still drawn, on that draft alone
    app = ok(app.multiselect(key="lost_drafts").set_value(["final"]).run())
    assert any("final: 3 runs" in c.value and "miswired" not in c.value for c in app.caption)


def test_where_lost_puts_drafts_run_at_different_k_side_by_side(db):
    """Issue 68: Where lost's K "per draft" puts a draft run at K 4 beside one run at K 2 (an
    EAGLE-3 draft beside a DFlash draft at its block), each at the K and decoding it was run with most."""
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.run.request import ReplayRequest
    from backend.service.datasets import ensure_demo_dataset, get_samples
    from backend.service.jobs import run_replay

    dataset = ensure_demo_dataset(db)
    for sample in get_samples(db, dataset)[:2]:
        for name, k in (("final", 4), ("miswired", 2)):
            request = ReplayRequest(
                str(DEMO_TARGET), str(DEMO_DRAFTS / name), prompt_ids=tuple(sample.prompt_ids),
                num_steps=k, max_new_tokens=16, sample_id=sample.id,
            )  # fmt: skip
            run_replay(request, db)
    app = page("6_Where_lost")
    app.session_state["global_target"] = str(DEMO_TARGET)
    app = ok(app.run())
    app = ok(app.multiselect(key="lost_drafts").set_value(["final", "miswired"]).run())
    app = ok(app.selectbox(key="lost_k").set_value(4).run())  # one K: the other draft has no run there
    assert any("final: 2 runs" in c.value and "miswired" not in c.value for c in app.caption)
    picker = app.selectbox(key="lost_k")
    app = ok(picker.select_index(len(picker.options) - 1).run())  # the last option: per draft
    said = " ".join(c.value for c in app.caption).replace("\\", "")
    assert "final: K=4, chain greedy" in said and "miswired: K=2, chain greedy" in said
    assert "final: 2 runs" in said and "miswired: 2 runs" in said
