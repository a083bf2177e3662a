"""Every dashboard page under Streamlit's AppTest on the bundled demo pair (widgets by key)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend.tasks import MANAGER
from db import store

REPO = Path(__file__).resolve().parents[1]


def page(name: str) -> AppTest:
    path = REPO / ("app.py" if name == "home" else f"pages/{name}.py")
    return AppTest.from_file(str(path), default_timeout=120)


@pytest.fixture()
def db(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'pages.db'}"
    monkeypatch.setenv("SPECLENS_DB_URL", url)
    monkeypatch.delenv("SPECLENS_TARGET", raising=False)
    monkeypatch.delenv("SPECLENS_DRAFT", raising=False)
    return url


def finish(app: AppTest, key: str) -> AppTest:
    task = MANAGER.wait(app.session_state[key], 300)
    assert task.status == "done", task.error
    return app.run()


def frame_with(app: AppTest, column: str):
    """The page's table that has `column` (AppTest looks up only widgets by key, not plain tables)."""
    frames = [f.value for f in app.dataframe if column in f.value.columns]
    assert frames, f"no table with a {column!r} column"
    return frames[0]


def ok(app: AppTest) -> AppTest:
    assert not app.exception, [e.message for e in app.exception]
    return app


def test_home_shows_the_demo_pair_and_registers_the_demo_dataset(db):
    app = ok(page("home").run())
    text = " ".join(m.value for m in app.markdown)
    assert "demo/target" in text and "demo/drafts/final" in text
    with store.session_scope(store.session_factory(store.make_engine(db))) as session:
        assert [d.name for d in store.list_datasets(session)] == ["demo eval (bundled)"]


def test_samples_filters_view_and_import(db, tmp_path):
    app = ok(page("1_Samples").run())
    total = len(frame_with(app, "loss-mask coverage"))
    sources = app.multiselect(key="samples_filter_source_1").value
    app.multiselect(key="samples_filter_source_1").set_value(sources[:1]).run()
    assert 0 < len(frame_with(app, "loss-mask coverage")) < total
    app.text_input(key="samples_filter_text").set_value("zzzz-not-there").run()
    assert any(c.value.startswith("0 of") for c in app.caption)
    app.text_input(key="samples_filter_text").set_value("").run()
    bad = tmp_path / "mixed.jsonl"
    bad.write_text(json.dumps({"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1], "source": "<b>x</b>"}) + "\n{oops\n")
    app.radio(key="samples_source").set_value("Path on this machine").run()
    app.text_input(key="samples_path").set_value(str(bad)).run()
    ok(app.button(key="samples_import_path").click().run())
    assert "imported 1 jsonl samples, rejected 1" in app.success[0].value
    assert frame_with(app, "reason")["line"].tolist() == [2]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("{oops\n")
    app.text_input(key="samples_path").set_value(str(empty)).run()
    ok(app.button(key="samples_import_path").click().run())
    assert "Nothing imported" in app.error[0].value
    with store.session_scope(store.session_factory(store.make_engine(db))) as session:
        assert len(store.list_datasets(session)) == 2  # the demo's and the mixed file's; not the empty one


def test_decode_runs_in_the_background_and_steps(db):
    app = ok(page("2_Decode").run())
    app.number_input(key="decode_max_new").set_value(32).run()
    app.button(key="decode_start").click().run()
    app = ok(finish(app, "decode_task"))
    app.run()
    assert float(app.metric[0].value) >= 1.0 and app.session_state["decode_step"] == 0
    ok(app.button(key="decode_next").click().run())
    assert app.session_state["decode_step"] == 1
    ok(app.button(key="decode_prev").click().run())
    assert app.session_state["decode_step"] == 0
    ok(app.button(key="decode_next_rejection").click().run())
    run_id = app.session_state["global_run_id"]
    with store.session_scope(store.session_factory(store.make_engine(db))) as session:
        steps = store.get_steps(session, run_id)
    current = app.session_state["decode_step"]
    rejecting = [i for i, s in enumerate(steps) if s.accepted_count < len(s.drafted_ids) and i > 0]
    assert current == (rejecting[0] if rejecting else 0)


def test_decode_bad_override_and_refused_draft(db, tmp_path):
    app = ok(page("2_Decode").run())
    app.text_input(key="decode_override").set_value("1,2").run()
    ok(app.button(key="decode_start").click().run())
    assert "expected three indices" in app.error[0].value
    broken = tmp_path / "broken"
    broken.mkdir()
    config = json.loads((REPO / "demo/drafts/final/config.json").read_text())
    (broken / "config.json").write_text(json.dumps(config))
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    app.session_state["global_drafts"] = {**app.session_state["global_drafts"], "broken": str(broken)}
    app.run()
    app.selectbox(key="decode_draft").set_value("broken")
    app.text_input(key="decode_override").set_value("").run()
    app.button(key="decode_start").click().run()
    task = MANAGER.wait(app.session_state["decode_task"], 120)
    assert task.status == "failed"
    app = ok(app.run())
    assert "failed" in app.error[0].value


def test_compare_diagnostics_and_runs(db):
    app = ok(page("3_Compare").run())
    app.number_input(key="compare_max_new").set_value(24).run()
    app.button(key="compare_start_one").click().run()
    app = ok(finish(app, "compare_task"))
    app.run()
    assert len(frame_with(app, "AL delta (B - A)")) == 1
    assert app.metric[1].value  # accept length B with its delta

    diagnostics = ok(page("4_Diagnostics").run())
    ok(diagnostics.button(key="lint_run").click().run())
    found = " ".join(e.value for e in diagnostics.error)
    assert "topk1-draft-tokens-reset" in found and "eagle-algorithm-eagle3-draft" in found

    runs = ok(page("5_Runs").run())
    assert len(frame_with(runs, "acceptance rate")) == 2
    runs.multiselect(key="runs_filter_draft").set_value(["epoch1"]).run()
    assert len(frame_with(runs, "acceptance rate")) == 1
    ok(runs.button(key="runs_delete").click().run())
    with store.session_scope(store.session_factory(store.make_engine(db))) as session:
        assert len(store.list_runs(session)) == 1


def test_runs_page_shows_a_failed_runs_error(db):
    factory = store.session_factory(store.make_engine(db))
    with store.session_scope(factory) as session:
        run_id = store.create_run(session, kind="replay", target_path="demo/target", draft_path="x", params={},
                                  aux_hf_indices=[2, 4, 5])
        store.fail_run(session, run_id, error="RuntimeError: the GPU fell over\ntraceback...")
    app = ok(page("5_Runs").run())
    assert "the GPU fell over" in app.error[0].value
