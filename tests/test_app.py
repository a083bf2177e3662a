"""The home page (app.py) under Streamlit's AppTest: the active demo pair, the demo dataset
registered on a fresh database, and the recent runs."""

from __future__ import annotations

import pytest

from tests.support.pages import ok, page

pytestmark = pytest.mark.slow


@pytest.fixture()
def db(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'app.db'}"
    monkeypatch.setenv("SPECLENS_DB_URL", url)
    monkeypatch.delenv("SPECLENS_TARGET", raising=False)
    monkeypatch.delenv("SPECLENS_DRAFT", raising=False)
    return url


def test_home_page_empty_and_with_a_run(db):
    from db import store

    app = ok(page("home").run())
    assert "No runs yet" in app.info[0].value
    factory = store.session_factory(store.make_engine(db))
    with store.session_scope(factory) as session:
        run_id = store.create_run(
            session,
            kind="replay",
            target_path="t",
            draft_path="d",
            params={"num_steps": 4},
            aux_hf_indices=[2, 16, 29],
        )
        store.finish_run(session, run_id, output_ids=[1, 2, 3], metrics={"mean_accept_length": 2.5})
    app = ok(page("home").run())
    frame = app.dataframe[0].value
    assert frame["accept length"].tolist() == [2.5] and frame["aux HF indices"].tolist() == ["[2, 16, 29]"]


def test_home_shows_the_demo_pair_and_registers_the_demo_dataset(db):
    from backend.service.datasets import list_datasets

    app = ok(page("home").run())
    text = " ".join(m.value for m in app.markdown)
    assert "demo/target" in text and "demo/drafts/final" in text
    assert [d.name for d in list_datasets(db)] == ["demo eval (bundled)"]


def test_a_draft_added_in_the_sidebar_is_selected_and_survives_a_reload(db, tmp_path):
    """Added drafts live in the database with the datasets: a new browser session (a reload) lists
    the draft and has it selected; a path that is not a directory says so."""
    import shutil

    from backend.defaults import DEMO_DRAFTS

    mine = tmp_path / "team" / "my-draft"
    shutil.copytree(DEMO_DRAFTS / "final", mine)
    app = ok(page("home").run())
    app.sidebar.text_input(key="sidebar_new_draft").input(str(mine))
    app = ok(app.sidebar.button(key="sidebar_add_draft").click().run())
    assert app.sidebar.selectbox(key="sidebar_draft").value == "my-draft"
    reloaded = ok(page("home").run())  # a fresh session on the same database
    box = reloaded.sidebar.selectbox(key="sidebar_draft")
    assert "my-draft" in box.options and box.value == "my-draft"
    reloaded.sidebar.text_input(key="sidebar_new_draft").input(str(tmp_path / "nowhere"))
    reloaded = reloaded.sidebar.button(key="sidebar_add_draft").click().run()
    assert any("no such directory" in e.value for e in reloaded.sidebar.error)


def test_a_configured_draft_named_like_a_demo_draft_is_the_one_selected(db, tmp_path, monkeypatch):
    """SPECLENS_DRAFT=.../final must not be shadowed by the bundled demo's own `final`."""
    import shutil

    from backend.defaults import DEMO_DRAFTS

    mine = tmp_path / "other" / "final"
    shutil.copytree(DEMO_DRAFTS / "final", mine)
    monkeypatch.setenv("SPECLENS_DRAFT", str(mine))
    app = ok(page("home").run())
    assert app.session_state["global_draft"] == str(mine)
    assert app.session_state["global_drafts"]["final"] == str(mine)
    assert "drafts/final" in app.session_state["global_drafts"]  # the demo's, under its folder
