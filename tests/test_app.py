"""The home page renders with an empty database and lists stored runs (Streamlit AppTest)."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from db import store

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def test_home_page_empty_and_with_a_run(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'app.db'}"
    monkeypatch.setenv("SPECLENS_DB_URL", url)
    app = AppTest.from_file(APP, default_timeout=60).run()
    assert not app.exception
    assert "No runs yet" in app.info[0].value
    factory = store.session_factory(store.make_engine(url))
    with store.session_scope(factory) as session:
        run_id = store.create_run(session, kind="replay", target_path="t", draft_path="d", params={"num_steps": 4},
                                  aux_hf_indices=[2, 16, 29])
        store.finish_run(session, run_id, output_ids=[1, 2, 3], metrics={"mean_accept_length": 2.5})
    app = AppTest.from_file(APP, default_timeout=60).run()
    assert not app.exception
    frame = app.dataframe[0].value
    assert frame["accept length"].tolist() == [2.5] and frame["aux HF indices"].tolist() == ["[2, 16, 29]"]
