"""Issue 58 row 1: the Runs page's picker, facts, export and delete always name the same run, also
after a search that matched nothing is cleared (a fast page test: stored runs made in the database,
no replay)."""

from __future__ import annotations

from tests.support.pages import frame_with, ok, page


def _runs(db, count: int) -> list[int]:
    from db import store

    factory = store.session_factory(store.make_engine(db))
    ids = []
    with store.session_scope(factory) as session:
        for number in range(count):
            run_id = store.create_run(
                session, kind="replay", target_path="demo/target", draft_path="demo/drafts/final",
                params={"num_steps": 4}, aux_hf_indices=[2, 4, 5],
                given=store.RunInput([1, 2, 3 + number], f"prompt {number}"),
            )  # fmt: skip
            store.finish_run(session, run_id, output_ids=[7, 8], metrics={"mean_accept_length": 1.5})
            ids.append(run_id)
    return ids


def _named(app) -> tuple[int, str, str]:
    """(the picker's run, the facts' run line, the export's file name)."""
    picker = next(box for box in app.selectbox if box.label == "Run")
    facts = frame_with(app, "what")
    delete = next(b for b in app.button if b.label.startswith("Delete run"))
    return picker.value, str(facts), delete.label


def test_the_picker_the_facts_and_delete_name_one_run_after_a_search_is_cleared(db):
    ids = _runs(db, 4)
    app = ok(page("5_Runs").run())
    picker = next(box for box in app.selectbox if box.label == "Run")
    assert picker.value == ids[-1]  # the newest first
    app = ok(picker.set_value(ids[1]).run())
    assert _named(app)[0] == ids[1] and _named(app)[2] == f"Delete run {ids[1]}"
    app = ok(app.text_input(key="runs_filter_sample").set_value("no such sample").run())
    assert not [box for box in app.selectbox if box.label == "Run"]  # nothing to pick
    app = ok(app.text_input(key="runs_filter_sample").set_value("").run())
    chosen, _, delete = _named(app)
    assert chosen == ids[1] and delete == f"Delete run {ids[1]}"  # the choice before the search, everywhere
    app = ok(app.text_input(key="runs_filter_sample").set_value("prompt 3").run())
    chosen, _, delete = _named(app)
    assert chosen == ids[3] and delete == f"Delete run {ids[3]}"  # narrowed away from it: the one shown


def test_runs_are_found_by_their_prompt_text_and_a_typed_prompt_is_labelled_by_its_start(db):
    """Issue 58 row 8: 'Sample contains' found nothing for HumanEval/2, below_zero, fib or def, and a
    typed prompt was labelled 'prompt'."""
    from tokenizers import Tokenizer

    from backend.defaults import DEMO_TARGET
    from db import store

    ids = Tokenizer.from_file(str(DEMO_TARGET / "tokenizer.json")).encode("def fib(n):\n    return n").ids
    factory = store.session_factory(store.make_engine(db))
    with store.session_scope(factory) as session:
        typed = store.create_run(
            session, kind="replay", target_path=str(DEMO_TARGET), draft_path="demo/drafts/final",
            params={"num_steps": 4}, aux_hf_indices=[2, 4, 5], given=store.RunInput(ids, "prompt"),
        )  # fmt: skip
        store.finish_run(session, typed, output_ids=[7], metrics={})
    _runs(db, 2)
    app = ok(page("5_Runs").run())
    table = frame_with(app, "acceptance rate")
    assert table.loc[table["run"] == typed, "sample"].item() == "prompt: def fib(n): return n"
    app = ok(app.text_input(key="runs_filter_sample").set_value("fib(").run())
    assert list(frame_with(app, "acceptance rate")["run"]) == [typed]
    # the picker and the facts name it as the table does (they said just "prompt")
    picker = next(box for box in app.selectbox if box.label == "Run")
    assert picker.value == typed and " · prompt: def fib(n): return n · " in picker.format_func(typed)
    facts = frame_with(app, "what")
    assert facts.loc[facts["what"] == "sample", "value"].item() == "prompt: def fib(n): return n"


def test_a_run_of_a_samples_files_record_is_found_by_the_records_source(db, tmp_path):
    """Issue 58 row 8: `replay --samples FILE --index 2` stores "FILE#2" and no source: 'Sample
    contains' HumanEval/2 found none of its runs. The source is read from the file (the index counts
    its valid records, as `replay --index` does) and named in the table, the picker and the facts; a
    file that is gone leaves its runs by their ref, the page still drawn."""
    import json

    from db import store

    path = tmp_path / "eval.jsonl"
    records = [{"input_ids": [1, 2, n], "loss_mask": [0, 0, 1], "source": f"HumanEval/{n}"} for n in range(3)]
    path.write_text("not a record\n" + "\n".join(json.dumps(r) for r in records) + "\n")
    factory = store.session_factory(store.make_engine(db))
    made = []
    with store.session_scope(factory) as session:
        for ref in (f"{path}#2", f"{path}#0", f"{tmp_path / 'gone.jsonl'}#2"):
            run_id = store.create_run(
                session, kind="replay", target_path="demo/target", draft_path="demo/drafts/final",
                params={"num_steps": 4}, aux_hf_indices=[2, 4, 5], given=store.RunInput([1, 2], ref),
            )  # fmt: skip
            store.finish_run(session, run_id, output_ids=[7], metrics={})
            made.append(run_id)
    app = ok(page("5_Runs").run())
    app = ok(app.text_input(key="runs_filter_sample").set_value("humaneval/2").run())
    table = frame_with(app, "acceptance rate")
    assert list(table["run"]) == [made[0]] and table["sample"].item() == f"{path}#2 (HumanEval/2)"
    picker = next(box for box in app.selectbox if box.label == "Run")
    assert f" · {path}#2 (HumanEval/2) · " in picker.format_func(made[0])
    facts = frame_with(app, "what")
    assert facts.loc[facts["what"] == "sample", "value"].item() == f"{path}#2 (HumanEval/2)"
    app = ok(app.text_input(key="runs_filter_sample").set_value("gone.jsonl").run())
    assert frame_with(app, "acceptance rate")["sample"].tolist() == [f"{tmp_path / 'gone.jsonl'}#2"]


def test_a_delete_is_asked_for_per_run_and_said_once_done(db):
    """A walk deleted run 2, saw no word of it, and the same open control then offered run 4."""
    from backend.service.runs import get_run_with_steps

    ids = _runs(db, 3)
    app = ok(page("5_Runs").run())
    chosen = _named(app)[0]
    assert app.button(key="runs_delete").disabled  # not before its box is ticked
    app = ok(app.checkbox(key=f"runs_delete_sure_{chosen}").check().run())
    app = ok(app.button(key="runs_delete").click().run())
    assert get_run_with_steps(db, chosen)[0] is None
    assert [s.value for s in app.success] == [f"Run {chosen} deleted."]
    following = _named(app)[0]
    assert following in ids and following != chosen
    assert app.button(key="runs_delete").disabled  # the next run is not one click away
