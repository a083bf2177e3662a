"""Samples page (issue 13 item 8): filters belong to the dataset and start fresh on another one (a
new import included); the source filter starts empty (= all); the length slider spans the dataset's
own lengths; a clicked row opens its sample; a SpecForge sample lists the hidden states its file
holds; an upload says what it was uploaded as and is kept under uploads/, not a temporary path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.demo import feature_file_size
from tests.support.pages import REPO, frame_with, ok, page

pytestmark = pytest.mark.slow  # each test runs the whole page several times

FEATURES = REPO / "demo" / "data" / "features"


def table_of(app):
    """The samples table (its key carries the dataset and the filtered rows)."""
    (table,) = [f for f in app.dataframe if f.key and f.key.startswith("samples_table_")]
    return table


def import_path(app, path: Path):
    app.radio(key="samples_source").set_value("Path on this machine").run()
    app.text_input(key="samples_path").set_value(str(path)).run()
    return ok(app.button(key="samples_import_path").click().run())


def match_caption(app) -> str:
    return next(c.value for c in app.caption if " samples match" in c.value)


def test_filters_start_fresh_on_each_dataset(db):
    from backend.service.datasets import get_samples, list_datasets

    app = ok(page("1_Samples").run())
    lengths = [s.seq_len for s in get_samples(db, 1)]
    sources = app.multiselect(key="samples_filter_source_1")
    assert sources.value == [] and "empty = all" in sources.label  # no wall of selected tags
    assert len(sources.options) > 1
    length = app.slider(key="samples_filter_length_1")
    assert (length.min, length.max, length.value) == (
        min(lengths),
        max(lengths),
        (min(lengths), max(lengths)),
    )  # the dataset's own span, not 1..longest
    assert match_caption(app).startswith(f"{len(lengths)} of {len(lengths)}")
    app.text_input(key="samples_filter_text_1").set_value("zzzz-not-there").run()
    assert match_caption(app).startswith("0 of") and "clear the search" in match_caption(app)
    assert not [f for f in app.dataframe if f.key and f.key.startswith("samples_table_")]  # no empty grid

    tokens, hidden = feature_file_size("data_0.ckpt")
    bundled = {d.id for d in list_datasets(db)}  # each bundled pair's eval sets
    import_path(app, FEATURES / "data_0.ckpt")  # the import selects the new dataset
    (new,) = {d.id for d in list_datasets(db)} - bundled
    assert app.selectbox(key="samples_dataset_select").value == new
    assert match_caption(app).startswith("1 of 1")  # the first dataset's search did not follow it
    assert app.text_input(key=f"samples_filter_text_{new}").value == ""
    assert not [s for s in app.slider if s.key == f"samples_filter_length_{new}"]  # one length: no slider
    assert any(f"every sample has {tokens} tokens" in c.value for c in app.caption)
    tensors = frame_with(app, "shape").set_index("tensor")
    assert tensors.loc["hidden_state", "shape"] == f"[1, {tokens}, {hidden}]"
    assert tensors.loc["aux_hidden_state", "shape"] == f"[1, {tokens}, {3 * hidden}]"
    assert tensors.loc["aux_hidden_state", "dtype"] == "bfloat16"

    app.text_input(key=f"samples_filter_text_{new}").set_value("zzzz-not-there").run()
    assert match_caption(app).startswith("0 of 1")
    ok(app.selectbox(key="samples_dataset_select").set_value(1).run())
    assert app.text_input(key="samples_filter_text_1").value == ""  # back on the first: fresh too
    assert match_caption(app).startswith(f"{len(lengths)} of")


def click(app, key: str, rows=(), cells=()):
    """What a click in the browser sends: the table's selection (a row's box, or one cell)."""
    app.session_state[key] = {"selection": {"rows": list(rows), "columns": [], "cells": list(cells)}}
    return ok(app.run())


def test_a_clicked_row_opens_its_sample(db):
    app = ok(page("1_Samples").run())
    table = table_of(app)
    numbers = table.value["#"].tolist()
    assert app.selectbox(key="samples_pick_1").value == numbers[0]
    click(app, table.key, rows=[3])  # the row's box
    assert app.selectbox(key="samples_pick_1").value == numbers[3]
    assert any(m.value.startswith(f"**Sample #{numbers[3]}**") for m in app.markdown)
    click(app, table.key, cells=[(2, "answer starts")])  # any cell of a row
    assert app.selectbox(key="samples_pick_1").value == numbers[2]
    ok(app.selectbox(key="samples_pick_1").set_value(numbers[5]).run())  # the picker still works...
    assert app.selectbox(key="samples_pick_1").value == numbers[5]
    assert list(app.session_state[table.key]["selection"]["rows"]) == [5]  # ...and the table follows it
    ok(app.run())
    assert app.selectbox(key="samples_pick_1").value == numbers[5]  # the old selection is no new click
    click(app, table.key, cells=[(1, "source")])  # the next click wins over the picker
    assert app.selectbox(key="samples_pick_1").value == numbers[1]

    app.text_input(key="samples_filter_text_1").set_value("the").run()  # other rows: another table
    assert table_of(app).key != table.key
    assert app.selectbox(key="samples_pick_1").value in table_of(app).value["#"].tolist()


def test_an_upload_is_kept_and_says_what_it_was(db):
    from backend.service.database import open_database
    from backend.service.datasets import list_datasets

    app = ok(page("1_Samples").run())
    app.radio(key="samples_source").set_value("Upload").run()
    data = (FEATURES / "data_1.ckpt").read_bytes()
    app.file_uploader(key="samples_upload").upload("data_1.ckpt", data)
    ok(app.run())
    ok(app.button(key="samples_import_upload").click().run())
    assert "imported 1 sample (format: specforge)" in app.success[0].value
    dataset = list_datasets(db)[-1]
    uploads = (open_database(db).artifact_dir.parent / "uploads").resolve()
    saved = Path(dataset.path)
    assert saved.parent.parent == uploads and saved.name == "data_1.ckpt" and saved.read_bytes() == data
    assert any(c.value.startswith("Uploaded as data\\_1\\.ckpt") for c in app.caption)
    assert "uploaded as data_1.ckpt" in frame_with(app, "origin")["origin"].tolist()
    tokens, hidden = feature_file_size("data_1.ckpt")
    assert (
        frame_with(app, "shape").set_index("tensor").loc["hidden_state", "shape"]
        == f"[1, {tokens}, {hidden}]"
    )

    saved.unlink()  # a feature file gone: a one-line note, no traceback
    ok(app.run())
    assert any(c.value.startswith("Hidden states:") and "no longer at" in c.value for c in app.caption)
    assert not [f for f in app.dataframe if "shape" in f.value.columns]


def test_a_dataset_made_with_another_tokenizer_is_flagged(db):
    """Issue 40: each bundled pair registers its eval sets; SmolLM2's ids read by the toy's tokenizer
    are named as another tokenizer's, the toy's own set is not flagged."""
    from backend.defaults import REAL
    from backend.service.datasets import list_datasets

    app = ok(page("1_Samples").run())
    ids = {d.path: d.id for d in list_datasets(db)}
    assert (
        app.selectbox(key="samples_dataset_select").value == ids[str(REPO / "demo" / "data" / "eval.jsonl")]
    )
    assert not [w for w in app.warning if "another model" in w.value]
    ok(app.selectbox(key="samples_dataset_select").set_value(ids[str(REAL.eval_set)]).run())
    (warning,) = [w.value.replace("\\", "") for w in app.warning if "another model" in w.value]
    assert "past the target's vocabulary of 2,048" in warning


def test_samples_open_on_the_real_pair_s_own_eval_set(db, monkeypatch):
    from backend.defaults import REAL
    from backend.service.datasets import list_datasets

    if not REAL.ready():
        pytest.skip("the SmolLM2 pair is not set up (python -m demo.smollm2)")
    monkeypatch.delenv("SPECLENS_DEMO")  # the defaults choose: the real pair, set up
    app = ok(page("1_Samples").run())
    ids = {d.path: d.id for d in list_datasets(db)}
    assert app.selectbox(key="samples_dataset_select").value == ids[str(REAL.eval_set)]
    assert not [w for w in app.warning if "another model" in w.value]
    answers = table_of(app).value["answer starts"]  # issue 58 row 15: not the same system turn every row
    assert answers.nunique() > len(answers) // 2 and not answers.iloc[0].startswith("<|im_start|>system")
    ok(app.selectbox(key="samples_dataset_select").set_value(1).run())  # the toy's, read by SmolLM2
    (warning,) = [w.value.replace("\\", "") for w in app.warning if "another model" in w.value]
    assert "span only 0..2046 of the target's 49,152-token vocabulary" in warning
