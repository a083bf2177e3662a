"""Decode's run picker opens on the newest run of the sidebar's pair, not on the newest run of any pair
(a fast page test: stored runs made in the database, no replay)."""

from __future__ import annotations

from tests.support.pages import ok, page


def _run(db, target: str, draft: str) -> int:
    from db import store

    factory = store.session_factory(store.make_engine(db))
    with store.session_scope(factory) as session:
        run_id = store.create_run(
            session, kind="replay", target_path=target, draft_path=draft, params={"num_steps": 4},
            aux_hf_indices=[2, 4, 5], given=store.RunInput([1, 2, 3], "a prompt"),
        )  # fmt: skip
        store.finish_run(session, run_id, output_ids=[7, 8], metrics={"mean_accept_length": 1.5})
    return run_id


def _picked(app) -> int:
    return next(box for box in app.selectbox if box.label == "Run").value


def test_the_picker_opens_on_the_sidebar_pairs_newest_run(db, tmp_path):
    from backend.defaults import default_draft, default_target

    active_target, active_draft = default_target(), default_draft()
    other_target, other_draft = str(tmp_path / "other-target"), str(tmp_path / "other-draft")
    older_other_draft = _run(db, active_target, str(tmp_path / "another-draft"))
    of_the_active_draft = _run(db, active_target, active_draft)
    newest_of_another_pair = _run(db, other_target, other_draft)
    assert _picked(ok(page("2_Decode").run())) == of_the_active_draft
    # no run of the active draft: the newest of its target; none of either: the newest run
    _run(db, active_target, str(tmp_path / "a-newer-draft"))
    from db import store

    factory = store.session_factory(store.make_engine(db))
    with store.session_scope(factory) as session:
        store.delete_run(session, of_the_active_draft)
    assert _picked(ok(page("2_Decode").run())) == newest_of_another_pair + 1
    with store.session_scope(factory) as session:
        for run_id in (older_other_draft, newest_of_another_pair + 1):
            store.delete_run(session, run_id)
    assert _picked(ok(page("2_Decode").run())) == newest_of_another_pair
