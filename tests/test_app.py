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
    assert [d.name for d in list_datasets(db)][0] == "demo eval (bundled)"
    assert any(d.name.startswith("SmolLM2: HumanEval") for d in list_datasets(db))


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
    cut = tmp_path / "team" / "cut"  # issue 58 row 4: a config.json cut mid-string
    shutil.copytree(mine, cut)
    (cut / "config.json").write_text((mine / "config.json").read_text()[:40])
    reloaded.sidebar.text_input(key="sidebar_new_draft").input(str(cut))
    reloaded = reloaded.sidebar.button(key="sidebar_add_draft").click().run()
    assert any("not valid JSON" in e.value for e in reloaded.sidebar.error)
    assert reloaded.sidebar.selectbox(key="sidebar_draft").value == "my-draft"
    assert (
        ok(page("home").run()).sidebar.selectbox(key="sidebar_draft").value == "my-draft"
    )  # nobody's default


def test_a_configured_draft_named_like_a_demo_draft_is_the_one_selected(db, tmp_path, monkeypatch):
    """SPECLENS_DRAFT=.../final must not be shadowed by the bundled demo's own `final`."""
    import shutil

    from backend.defaults import DEMO_DRAFTS

    mine = tmp_path / "other" / "final"
    shutil.copytree(DEMO_DRAFTS / "final", mine)
    monkeypatch.setenv("SPECLENS_DRAFT", str(mine))
    app = ok(page("home").run())
    assert app.session_state["global_draft"] == str(mine)
    box = app.sidebar.selectbox(key="sidebar_draft")
    assert box.value == "other/final"  # the configured one, told apart by its folder
    assert "final" in box.options  # the bundled pair's own keeps its plain name


def test_home_tells_the_demo_s_story_from_the_demo_s_own_files(db):
    """Issue 31 item 6: Home says which draft is broken and why, with the wirings read from the files
    (the lab note and the config as read), and links the start-here path: Compare final vs miswired,
    then Diagnostics with miswired active."""
    import json

    from backend.defaults import DEMO_DRAFTS

    app = ok(page("home").run())
    text = " ".join(m.value for m in app.markdown)
    trained = json.loads((DEMO_DRAFTS / "miswired" / "TRAINED_WIRING.json").read_text())["aux_hf_indices"]
    assert f"trained on HF hidden states **{trained}**" in text
    assert "declares **[2, 6, 9]**" in text and "Start here" in text
    links = {(link.proto.page, link.proto.label) for link in app.get("page_link")}
    pages = {page for page, label in links if label.startswith(("1.", "2."))}
    assert any("Compare" in p for p in pages) and any("Diagnostics" in p for p in pages)


def test_a_link_s_draft_becomes_the_active_draft_once(db):
    """?draft=miswired (Home's step 2) makes miswired active on arrival; the address then names the
    active draft on every page, so a later sidebar choice is not overridden and a reload (a new session
    on that address) opens on the same draft; an unknown name keeps the active draft and says so."""
    from backend.defaults import DEMO_DRAFTS

    app = page("4_Diagnostics")
    app.query_params["draft"] = "miswired"
    app = ok(app.run())
    assert app.sidebar.selectbox(key="sidebar_draft").value == "miswired"
    assert any("the active draft, on every page" in i.value for i in app.info)  # said, not silent
    assert str(DEMO_DRAFTS / "miswired") in " ".join(c.value for c in app.caption)
    assert app.query_params["draft"] == "miswired"
    app.sidebar.selectbox(key="sidebar_draft").set_value("epoch1")
    app = ok(app.run())
    assert app.sidebar.selectbox(key="sidebar_draft").value == "epoch1"
    assert app.query_params["draft"] == "epoch1"  # the address follows the sidebar, silently
    assert not any("the active draft, on every page" in i.value for i in app.info)
    app = ok(app.run())
    assert app.sidebar.selectbox(key="sidebar_draft").value == "epoch1"
    reloaded = page("4_Diagnostics")
    reloaded.query_params["draft"] = app.query_params["draft"]
    reloaded = ok(reloaded.run())
    assert reloaded.sidebar.selectbox(key="sidebar_draft").value == "epoch1"
    plain = ok(page("4_Diagnostics").run())
    assert plain.query_params["draft"] == plain.sidebar.selectbox(key="sidebar_draft").value
    other = page("home")
    other.query_params["draft"] = "nope"
    other = ok(other.run())
    assert any("does not know" in w.value for w in other.warning)


def test_compare_opens_on_the_drafts_a_link_names(db):
    app = page("3_Compare")
    app.query_params["a"] = "final"
    app.query_params["b"] = "miswired"
    app = ok(app.run())
    assert app.selectbox(key="compare_draft_a").value == "final"
    assert app.selectbox(key="compare_draft_b").value == "miswired"
    plain = ok(page("3_Compare").run())
    assert (plain.selectbox(key="compare_draft_a").value, plain.selectbox(key="compare_draft_b").value) == (
        "epoch1",
        "final",
    )
