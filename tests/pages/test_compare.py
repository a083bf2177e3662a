"""Compare page: two demo drafts on one sample, in the background, stored as two runs; what differed
said in words; the batch summary; a running batch hides the previous table; a clicked row opens
its pair. The fast tests store hand-made runs (no model) and fake the background task."""

from __future__ import annotations

import re
import threading

import pytest

from tests.support.pages import finish, frame_with, ok, page

SPACE, NEWLINE, LT, X, SELF, RETURN, DEF = 224, 202, 31, 91, 283, 305, 297
PROMPT = [DEF, X]


def store_run(
    db: str, draft: str, steps: list[dict], *, sample_id=None, al: float | None = None, prompt=PROMPT
) -> int:
    """A finished run of the demo target with the given verify steps (no model involved): each step
    {"position", "drafted", "accepted", "bonus"}; its output is the prefill token X then the steps'
    committed tokens."""
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.run.records import StepRecord
    from db import store

    records, output = [], [X]
    for number, s in enumerate(steps):
        committed = list(s["drafted"][: s["accepted"]]) + [s["bonus"]]
        records.append(
            StepRecord(
                step_index=number,
                position=s["position"],
                pending_token=output[-1],
                drafted_ids=list(s["drafted"]),
                accepted_count=s["accepted"],
                bonus_id=s["bonus"],
                committed_ids=committed,
                target_argmax_ids=committed + [s["bonus"]] * (len(s["drafted"]) + 1 - len(committed)),
            )
        )
        output += committed
    factory = store.session_factory(store.make_engine(db))
    with store.session_scope(factory) as session:
        run_id = store.create_run(
            session,
            kind="replay",
            target_path=str(DEMO_TARGET),
            draft_path=str(DEMO_DRAFTS / draft),
            params={"num_steps": 2, "topk": 1, "num_draft_tokens": 3, "engine": "sglang"},
            aux_hf_indices=[2, 4, 5],
            given=store.RunInput(list(prompt), "dataset 1 #0" if prompt == PROMPT else "prompt", sample_id),
        )
        store.add_steps(session, run_id, records)
        mean = al if al is not None else sum(s["accepted"] + 1 for s in steps) / len(steps)
        store.finish_run(session, run_id, output_ids=output, metrics={"mean_accept_length": mean})
    return run_id


def two_runs(db: str) -> tuple[int, int]:
    """A and B agree on output position 1 (both proposed ' self'); at output position 2 A proposed
    a space (accepted), B proposed '<' (rejected; the target's token there is the space)."""
    a = store_run(db, "epoch1", [{"position": 2, "drafted": [SELF, SPACE], "accepted": 2, "bonus": NEWLINE}])
    b = store_run(
        db,
        "final",
        [
            {"position": 2, "drafted": [SELF, LT], "accepted": 1, "bonus": SPACE},
            {"position": 4, "drafted": [NEWLINE, RETURN], "accepted": 1, "bonus": RETURN},
        ],
    )
    return a, b


def opened(app) -> tuple[int, int]:
    return app.selectbox(key="compare_run_a").value, app.selectbox(key="compare_run_b").value


def said(app) -> str:
    """The sentences under the timelines, as plain text."""
    blocks = [h.proto.body for h in app.html if "sl-said" in h.proto.body]
    assert len(blocks) == 1
    return re.sub(r"<[^>]+>", "", blocks[0].split('<div class="sl-said">', 1)[1])


def test_runs_of_different_prompts_show_both_outputs_and_compare_no_positions(db):
    """A walk paired a dataset-sample run with a typed-prompt run: B's row was empty (its window was
    taken from A's prompt length) and the page said the drafts agreed everywhere."""
    a = store_run(db, "epoch1", [{"position": 2, "drafted": [SELF, SPACE], "accepted": 2, "bonus": NEWLINE}])
    longer = [*PROMPT, SPACE, SELF, NEWLINE]
    b = store_run(
        db, "final", [{"position": 5, "drafted": [RETURN, LT], "accepted": 1, "bonus": SPACE}], prompt=longer
    )
    app = page("3_Compare")
    app.session_state["global_compare_runs"] = (a, b)
    app = ok(app.run())
    assert any("different prompts" in w.value for w in app.warning)
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["Drafts first differ at"] == "—" and metrics["Outputs first differ at"] == "—"
    body = next(h.proto.body for h in app.html if "<b>B</b>" in h.proto.body)
    row_a, row_b = body.split("<b>A</b>", 1)[1].split("<b>B</b>", 1)
    assert row_a.count('class="sl-t ') == 4 and row_b.count('class="sl-t ') == 3  # every output token
    assert '<div class="sl-said">' not in body  # no sentence on where the drafts differ
    assert {"Run A's prompt ends:", "Run B's prompt ends:"} <= {c.value for c in app.caption}  # each its own


def test_compare_says_what_differed_in_words(db):
    import html

    a, b = two_runs(db)
    app = page("3_Compare")
    app.session_state["global_compare_runs"] = (a, b)
    app = ok(app.run())
    assert opened(app) == (a, b)
    text = html.unescape(said(app))
    assert (
        "At output position 2 (sequence position 4; verify step 1 of A / step 1 of B): A's draft proposed "
        "'␣' (accepted), B's draft proposed '<' (rejected); the target's token there is '␣'." in text
    )
    # A committed x ' self' ' ' '\n'; B committed x ' self' ' ' then '\n' ' return': A is a prefix of B
    assert "The outputs agree over their first 4 tokens; B goes on for 1 more." in text
    body = next(h.proto.body for h in app.html if "sl-said" in h.proto.body)
    assert "&lt;" in body and "'<'" not in body  # the token text is escaped
    assert app.metric[3].value == "output 2"


def test_legend_lists_exactly_what_the_timelines_draw(db):
    a, b = two_runs(db)
    app = page("3_Compare")
    app.session_state["global_compare_runs"] = (a, b)
    app = ok(app.run())
    body = next(h.proto.body for h in app.html if "sl-legend" in h.proto.body)
    legend, timelines = body.split('<div class="sl-legend">', 1)[1].split("</div>", 1)
    listed = set(re.findall(r'class="sl-t ([\w-]+)"', legend))
    drawn = {c for classes in re.findall(r'<span class="sl-t ([^"]+)"', timelines) for c in classes.split()}
    assert listed == drawn == {"sl-acc", "sl-bonus", "sl-step", "sl-cur"}
    assert "rejected</span>" not in legend and "not reached" not in legend


def test_words_for_diverging_outputs_and_hostile_tokens():
    """ui.compare without Streamlit: the target's token differs per run when the outputs already
    diverged, and the outputs' own divergence is named; token text is escaped and made visible."""
    import html

    from backend.run.records import StepRecord
    from ui.compare.timeline import committed_positions, difference_html, visible

    class A:
        prompt_ids, output_ids = [7], [1, 2, 3]

    class B:
        prompt_ids, output_ids = [7], [1, 5, 6]

    def step(position, drafted, accepted, bonus):
        committed = list(drafted[:accepted]) + [bonus]
        return StepRecord(0, position, 1, list(drafted), accepted, bonus, committed, committed)

    pieces = {1: "a", 2: "<script>", 3: "\n", 4: " x", 5: "b", 6: "c"}.get
    steps_a, steps_b = [step(1, [2, 3], 2, 9)], [step(1, [4, 6], 0, 5), step(2, [6], 1, 9)]
    said = difference_html(A, B, committed_positions(A, steps_a), committed_positions(B, steps_b), pieces)
    assert "<script>" not in said and "&lt;script&gt;" in said
    text = html.unescape(re.sub(r"<[^>]+>", "", said))
    assert (
        "At output position 1 (sequence position 2; verify step 1 of A / step 1 of B): A's draft proposed "
        "'<script>' (accepted), B's draft proposed '␣x' (rejected); the target's token there is "
        "'<script>' in A and 'b' in B." in text
    )
    assert "The outputs themselves diverge at output position 1: A has '<script>', B has 'b'" in text
    assert visible("\n") == "'\\n'" and visible(" ") == "'␣'"


def test_batch_summary_counts_wins_and_leaves_out_samples_without_an_accept_length():
    import statistics

    from backend.run.metrics import mean_ci95
    from ui.compare.batch import BatchSummary, batch_summary

    pairs = [(1, 2)] * 5
    rows = batch_rows(pairs, [(2.0, 3.0), (3.0, 2.0), (1.0, 3.0), (2.5, 2.5), (None, 2.0)])
    summary = batch_summary(rows)
    assert summary == BatchSummary(
        samples=4,
        mean_a=2.125,
        mean_b=2.625,
        mean_delta=0.5,
        delta_ci95=mean_ci95([1.0, -1.0, 2.0, 0.0]),
        wins_a=1,
        wins_b=2,
        ties=1,
        without_accept_length=1,
        delta_sd=statistics.stdev([1.0, -1.0, 2.0, 0.0]),
    )
    assert batch_summary([]).mean_a is None


def batch_rows(pairs: list[tuple[int, int]], als: list[tuple[float | None, float]]) -> list:
    """A comparison's rows (tasks.CompareRow) for these pairs of runs and accept lengths."""
    from backend.service.tasks import CompareRow

    return [
        CompareRow(i, "unit", a, x, b, y, y - (x or 0))
        for i, ((a, b), (x, y)) in enumerate(zip(pairs, als, strict=True))
    ]


def test_batch_summary_and_a_running_batch_hides_the_old_table(db):
    from backend.service.tasks import MANAGER, CompareResult

    a, b = two_runs(db)
    c, d = two_runs(db)
    rows = batch_rows([(a, b), (c, d), (a, d)], [(2.0, 3.0), (2.5, 2.0), (1.5, 1.5)])
    app = page("3_Compare")
    app.session_state["compare_result"] = ("old", CompareResult(rows, reused=4, replayed=2))
    app = ok(app.run())
    assert len(frame_with(app, "AL delta (B - A)")) == 3
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["Mean AL A"] == "2.00" and metrics["Mean AL B"] == "2.17"
    assert metrics["Mean delta (B - A)"] == "+0.17" and metrics["Wins A / B / ties"] == "1 / 1 / 1"
    assert metrics["Samples"] == "3"
    caption = " ".join(c.value for c in app.caption)
    assert "accepted drafts + 1" in caption and "4 run(s) reused" in caption and "2 replayed" in caption

    release, new_rows = threading.Event(), batch_rows([(c, d)], [(1.0, 4.0)])

    def work(progress):
        progress(0.5, "sample 1/1, draft B")
        release.wait(30)
        return CompareResult(new_rows, reused=0, replayed=2)

    app.session_state["compare_task"] = MANAGER.submit("compare", "epoch1 vs final on 1 sample(s)", work)
    app = ok(app.run())
    assert not [f for f in app.dataframe if "AL delta (B - A)" in f.value.columns]  # the old table is gone
    assert "hidden while a new comparison runs" in app.info[0].value
    assert app.button(key="compare_start_batch").disabled
    release.set()
    MANAGER.wait(app.session_state["compare_task"], 30)
    app = ok(app.run())
    app = ok(app.run())
    assert frame_with(app, "AL delta (B - A)")["run A"].tolist() == [c]  # the new batch's table
    assert opened(app) == (c, d)  # its first row is opened
    assert not app.info


def test_clicking_a_row_opens_its_pair(db):
    from backend.service.tasks import CompareResult

    a, b = two_runs(db)
    c, d = two_runs(db)
    rows = batch_rows([(a, b), (c, d)], [(2.0, 3.0), (2.5, 2.0)])
    app = page("3_Compare")
    app.session_state["compare_result"] = ("t1", CompareResult(rows, reused=0, replayed=4))
    app.session_state["global_compare_runs"] = (a, b)
    app = ok(app.run())
    assert opened(app) == (a, b)
    app.session_state["compare_table_t1"] = {"selection": {"rows": [1], "columns": [], "cells": []}}
    app = ok(app.run())
    assert opened(app) == (c, d)
    app.selectbox(key="compare_run_a").set_value(b)  # the user picks another run by hand ...
    app = ok(app.run())
    assert opened(app) == (b, d)
    app.session_state["compare_table_t1"] = {"selection": {"rows": [], "columns": [], "cells": []}}
    app = ok(app.run())
    app.session_state["compare_table_t1"] = {"selection": {"rows": [1], "columns": [], "cells": []}}
    app = ok(app.run())
    assert opened(app) == (c, d)  # ... and the same row clicked again opens its pair again
    labels = app.selectbox(key="compare_run_a").options
    assert all(re.match(r"run \d+ · finished · epoch1|run \d+ · finished · final", o) for o in labels)


@pytest.mark.slow
def test_compare_two_drafts_on_a_sample(db):
    from backend.defaults import DEMO_DRAFTS
    from backend.service.runs import list_runs

    app = ok(page("3_Compare").run())
    app.number_input(key="compare_max_new").set_value(24).run()
    app.button(key="compare_start_one").click().run()
    app = ok(finish(app, "compare_task"))
    app.run()
    assert len(frame_with(app, "AL delta (B - A)")) == 1
    assert app.metric[1].value  # mean AL B
    runs = list_runs(db)
    assert sorted(r.draft_path for r in runs) == [str(DEMO_DRAFTS / "epoch1"), str(DEMO_DRAFTS / "final")]
    assert all(r.status == "finished" and r.sample_ref == "dataset 1 #0" for r in runs)
    assert opened(app) == (runs[1].id, runs[0].id)  # the new pair is opened
    assert "1 run(s) reused" not in " ".join(c.value for c in app.caption)
    # the same comparison again reuses both runs instead of replaying them
    app.button(key="compare_start_one").click().run()
    app = ok(finish(app, "compare_task"))
    app.run()
    assert len(list_runs(db)) == 2
    assert "2 run(s) reused (finished runs of the same draft, sample and settings), 0 replayed" in " ".join(
        c.value for c in app.caption
    )
    # B at its own K (an EAGLE-3 draft at its K against a DFlash draft at its block): A's run is reused
    k = app.number_input(key="compare_steps").value
    app.number_input(key="compare_steps_b").set_value(k - 1).run()
    app.button(key="compare_start_one").click().run()
    app = ok(finish(app, "compare_task"))
    app.run()
    newest = list_runs(db)[0]
    assert len(list_runs(db)) == 3 and newest.request.num_steps == k - 1
    assert newest.draft_path == str(DEMO_DRAFTS / "final")
    said = " ".join(m.value for m in app.markdown).replace("\\", "")  # unescaped
    assert f"final (K={k - 1}) (B)" in said or f"epoch1 (K={k}) (A)" in said


def test_the_pickers_match_the_comparison_on_screen(db):
    """Issue 43 row 6: entering Compare again (its widgets made anew) shows the drafts of the comparison
    below, not epoch1 vs final, so a batch started from there runs the pair on screen."""

    empty = ok(page("3_Compare").run())  # nothing to show below: epoch1 vs final
    assert (empty.selectbox(key="compare_draft_a").value, empty.selectbox(key="compare_draft_b").value) == (
        "epoch1",
        "final",
    )
    steps = [{"position": 2, "drafted": [SELF, SPACE], "accepted": 2, "bonus": NEWLINE}]
    a, b = store_run(db, "final", steps), store_run(db, "miswired", steps)
    app = page("3_Compare")
    app.session_state["global_compare_runs"] = (a, b)
    app = ok(app.run())
    assert opened(app) == (a, b)
    assert (app.selectbox(key="compare_draft_a").value, app.selectbox(key="compare_draft_b").value) == (
        "final",
        "miswired",
    )
    # a new session shows the two newest runs side by side: the pickers follow them too
    fresh = ok(page("3_Compare").run())
    assert opened(fresh) == (a, b)
    assert (fresh.selectbox(key="compare_draft_a").value, fresh.selectbox(key="compare_draft_b").value) == (
        "final",
        "miswired",
    )


def test_an_unfinished_run_shows_no_accept_length_and_says_why(db):
    """A run whose writer died (the server stopped mid-run) has no metrics: a dash and a warning, not
    'Accept length 0.00' beside outputs that 'differ' only where it stopped."""
    from db import store
    from db.models import Run

    steps = [{"position": 2, "drafted": [SELF, SPACE], "accepted": 2, "bonus": NEWLINE}]
    a, b = store_run(db, "final", steps), store_run(db, "miswired", steps)
    factory = store.session_factory(store.make_engine(db))
    with store.session_scope(factory) as session:  # what the writer's death leaves: no metrics
        run = session.get(Run, b)
        run.status, run.error, run.metrics = "interrupted", "interrupted: its writer is gone", {}
    app = page("3_Compare")
    app.session_state["global_compare_runs"] = (a, b)
    app = ok(app.run())
    values = {m.label: m.value for m in app.metric}
    assert values["Accept length B"] == "—" and values["Accept length A"] != "—"
    assert any("Run B is interrupted, not finished" in w.value for w in app.warning)
    # issue 58 row 11: nor does the picker's label give it one; the finished run keeps its own
    labels = {o.split(" · ")[0]: o for o in app.selectbox(key="compare_run_b").options}
    assert labels[f"run {b}"].endswith("AL —") and labels[f"run {a}"].endswith("AL 3.00")
