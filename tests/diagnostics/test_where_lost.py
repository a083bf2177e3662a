"""Where acceptance is lost (backend/diagnostics/where_lost.py), on hand-built runs whose answer is known."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from backend.diagnostics.where_lost import MIN_ATTEMPTS, token_kind, where_lost, wilson
from backend.diagnostics.where_lost_result import LostRun, WhereLost

TEXT = {
    1: "def",
    2: " ",
    3: "(",
    4: "42",
    5: "<think>",
    6: "</think>",
    7: "x",
    9: "<eos>",
    10: "``",
    11: "`\n",
}


def step(index, drafted, a, probs, committed=None, target_probs=None, position=10):
    committed = committed if committed is not None else [*drafted[:a], 7 if a < len(drafted) else 1]
    argmax = [*drafted[:a], committed[a] if a < len(committed) else 1] + [1] * (len(drafted) - a)
    return SimpleNamespace(
        step_index=index,
        position=position,
        drafted_ids=drafted,
        accepted_count=a,
        committed_ids=committed,
        target_argmax_ids=argmax,
        target_argmax_probs=target_probs or [0.95] * (len(drafted) + 1),
        draft_probs=probs,
    )


def run(run_id, steps, source="chat", greedy=True):
    return LostRun(run_id, steps, source, greedy)


def text(token):
    return TEXT.get(token, f"t{token}")


def test_position_rates_pooled_and_over_samples():
    # run 1: a = 3, 0 (K = 3); run 2: a = 1, 1
    runs = [
        run(1, [step(0, [1, 1, 1], 3, [0.9] * 3), step(1, [2, 2, 2], 0, [0.2] * 3)]),
        run(2, [step(0, [1, 2, 3], 1, [0.9] * 3), step(1, [1, 2, 3], 1, [0.9] * 3)]),
    ]
    found = where_lost({"d": runs}, text).drafts[0]
    p1, p2, p3 = found.by_position
    assert (p1.marginal, p2.marginal, p3.marginal) == (0.75, 0.25, 0.25)
    assert p1.marginal_mean == pytest.approx((0.5 + 1.0) / 2) and p1.samples == 2
    assert p2.conditional == pytest.approx(1 / 3) and p3.conditional == 1.0
    assert (p1.rejections, p2.rejections, p3.rejections) == (1, 2, 0)  # the bar's step list says of how many
    # attempts: run 1 step 0 makes 3 (all accepted), step 1 makes 1; run 2 makes 2 + 2
    assert found.attempts == 8 and found.verify_steps == 4


def test_groups_count_attempts_and_a_small_group_is_not_judged():
    steps = [
        step(i, [1, 3], 1, [0.8, 0.8]) for i in range(MIN_ATTEMPTS)
    ]  # "def" accepted, then "(" rejected... as x
    found = where_lost({"d": [run(1, steps)]}, text).drafts[0]
    words = next(g for g in found.by_kind if g.group == "words / identifiers")
    # every step: attempt 1 "def" accepted, attempt 2 rejected where the target emitted 7 ("x", a word too)
    assert words.attempts == 2 * MIN_ATTEMPTS and words.accepted == MIN_ATTEMPTS and words.rate == 0.5
    assert words.ci95 == wilson(MIN_ATTEMPTS, 2 * MIN_ATTEMPTS) and words.share == 1.0
    (top,) = found.top_rejected
    assert (top.token_id, top.text, top.rejections, top.examples[0]) == (7, "x", MIN_ATTEMPTS, [1, 0])
    small = where_lost({"d": [run(1, steps[:3])]}, text).drafts[0].by_kind[0]
    assert small.rate is None and small.ci95 is None and "too few to judge" in small.note


def test_token_kinds_read_as_a_person_would():
    assert token_kind("    ", 2, frozenset()) == "whitespace / indentation"
    assert token_kind(" 42", 4, frozenset()) == "digits"
    assert token_kind("):", 3, frozenset()) == "punctuation"
    assert token_kind(" foo_bar", 1, frozenset()) == "words / identifiers"
    assert token_kind("<eos>", 9, frozenset({9})) == "special"
    assert token_kind("x=1", 8, frozenset()) == "mixed"


def test_calibration_bins_and_ece_by_hand():
    # position 1: probability 0.95, accepted 3 of 4 -> |0.75 - 0.95| = 0.2 in bin 9
    # position 2 (reached only where 1 was accepted): probability 0.15, accepted 1 of 3 -> |1/3 - 0.15|
    steps = [
        step(0, [1, 1], 2, [0.95, 0.15]),
        step(1, [1, 1], 1, [0.95, 0.15]),
        step(2, [1, 1], 1, [0.95, 0.15]),
        step(3, [2, 1], 0, [0.95, 0.15]),
    ]
    overall, first, second = where_lost({"d": [run(1, steps)]}, text).drafts[0].calibration
    assert (first.position, first.attempts, second.attempts) == (1, 4, 3)
    assert first.ece == pytest.approx(0.2) and second.ece == pytest.approx(abs(1 / 3 - 0.15))
    assert first.bins[9].attempts == 4 and first.bins[9].acceptance == 0.75
    assert overall.ece == pytest.approx((4 * 0.2 + 3 * abs(1 / 3 - 0.15)) / 7)


def test_brier_and_auroc_beside_the_ece_by_hand():
    """Issue 65 row 21: the calibration's Brier score and AUROC (as DeepSpec's evaluator reports them)."""
    from backend.diagnostics.where_lost import auroc

    assert auroc([0.9, 0.8, 0.2, 0.1], [True, True, False, False]) == 1.0
    assert auroc([0.1, 0.2, 0.8, 0.9], [True, True, False, False]) == 0.0
    assert auroc([0.5, 0.5, 0.5], [True, False, True]) == 0.5  # ties count half
    assert auroc([0.9, 0.4, 0.6, 0.3], [True, True, False, False]) == 0.75  # 3 of 4 pairs ordered
    assert auroc([0.9], [True]) is None
    # one step: drafts with p 0.9, 0.9 accepted, then 0.3 rejected
    found = where_lost({"d": [run(1, [step(0, [1, 1, 1], 2, [0.9, 0.9, 0.3])])]}, text).drafts[0]
    overall = found.calibration[0]
    assert overall.brier == pytest.approx((0.01 + 0.01 + 0.09) / 3) and overall.auroc == 1.0


def test_the_threshold_what_if_caps_each_step_at_the_drafts_it_keeps():
    steps = [step(0, [1, 1, 1], 3, [0.9, 0.9, 0.3]), step(1, [1, 2, 2], 1, [0.9, 0.2, 0.2])]
    rows = {r.threshold: r for r in where_lost({"d": [run(1, steps)]}, text).drafts[0].threshold_whatif}
    assert rows[None].accept_length == (4 + 2) / 2 and rows[None].drafts_per_step == 3
    assert rows[None].wasted_drafts == 2 and rows[None].accepted_lost == 0
    half = rows[0.5]  # step 0 keeps 2 (accepts 2 of its 3), step 1 keeps 1 (accepts it)
    assert half.accept_length == (3 + 2) / 2 and half.drafts_per_step == 1.5
    assert half.wasted_drafts == 0 and half.accepted_lost == 1
    sampled = where_lost({"d": [run(1, steps, greedy=False)]}, text).drafts[0]
    assert sampled.threshold_whatif[0].accept_length is None
    assert any("0 greedy-chain runs of 1" in note for note in sampled.notes)
    # issue 65 row 14: a predicted speed-up from the steps' own timings, and the best threshold named
    assert rows[None].speedup is None  # these steps kept no verify time
    assert any("no predicted speed-up" in n for n in where_lost({"d": [run(1, steps)]}, text).drafts[0].notes)
    for s in steps:  # a verify costs 10 ms a step, a draft 2 ms a token (6 ms for 3 drafts)
        s.verify_ms, s.draft_ms = 10.0, 2.0 * len(s.drafted_ids)
    timed = where_lost({"d": [run(1, steps)]}, text).drafts[0].threshold_whatif
    rows = {r.threshold: r for r in timed}
    assert rows[None].speedup == pytest.approx(3.0 * 10 / (3 * 2 + 10))
    assert rows[0.5].speedup == pytest.approx(2.5 * 10 / (1.5 * 2 + 10))
    from backend.diagnostics.threshold_whatif import best
    from backend.service.where_lost import best_thresholds

    assert best(timed).speedup == max(r.speedup for r in timed)
    block = LostRun(1, steps, "chat", True, draft_method="dflash")  # one forward drafts the whole block
    rows = {r.threshold: r for r in where_lost({"d": [block]}, text).drafts[0].threshold_whatif}
    per_step = (2.0 * 3 + 2.0 * 3) / 2  # draft ms a step
    assert rows[0.5].speedup == pytest.approx(2.5 * 10 / (per_step + 10))
    assert rows[0.5].speedup < rows[None].speedup  # a threshold saves a block no draft time
    found = where_lost({"d": [run(1, steps)]}, text)
    (said,) = best_thresholds(found)
    top = best(timed)
    assert f"stopping below p = {top.threshold:.1f}" in said and f"{top.speedup:.2f}" in said


def test_entropy_tiers_from_the_steps_tree_and_older_runs_said():
    low, high = step(0, [1, 1], 2, [0.9, 0.9]), step(1, [1, 3], 0, [0.9, 0.9])
    low.tree = SimpleNamespace(target_entropies=[0.1, 0.2, 0.3])  # both attempts accepted, certain target
    high.tree = SimpleNamespace(target_entropies=[3.0, 0.1, 0.1])  # the rejected attempt: an unsure target
    older = step(2, [1, 1], 1, [0.9, 0.9])  # stored before entropies were kept: no tree
    found = where_lost({"d": [run(1, [low, high, older])]}, text).drafts[0]
    tiers = {g.group: (g.attempts, g.accepted) for g in found.by_entropy}
    assert tiers == {"low (H < 0.5 nats)": (2, 2), "high (H >= 2)": (1, 0)}
    assert any("2 of 5 attempts come from runs stored before" in note for note in found.notes)


def test_code_and_prose_blocks_read_across_split_backticks():
    steps = [
        step(0, [7, 10], 2, [0.9, 0.9], committed=[7, 10, 11]),  # x, then ``` split over two tokens
        step(1, [1, 1], 1, [0.9, 0.9], committed=[1, 7]),  # inside the block
        step(2, [10, 11], 2, [0.9, 0.9], committed=[10, 11, 7]),  # the block closes; x after it
    ]
    found = where_lost({"d": [run(1, steps)]}, text).drafts[0]
    # prose: x and the opening `` (the block opens after its third backtick, in the bonus); code: def,
    # the x the target emitted where step 1 rejected, and the closing `` and ` (it closes after them)
    assert {g.group: g.attempts for g in found.by_block} == {"prose": 2, "code": 4}
    plain = where_lost({"d": [run(1, steps[1:2])]}, text).drafts[0]
    assert plain.by_block == [] and any("no fenced code" in note for note in plain.notes)


def test_thinking_and_answer_spans_and_sources():
    steps = [
        step(0, [5, 1], 2, [0.9, 0.9], committed=[5, 1, 2]),  # <think> def, then " " (bonus)
        step(1, [6, 1], 0, [0.9, 0.9], committed=[6]),  # rejected: the target closed the span
        step(2, [1, 1], 1, [0.9, 0.9], committed=[1, 7]),
    ]
    found = where_lost({"d": [run(1, steps, source="humaneval"), run(2, steps[2:])]}, text).drafts[0]
    spans = {g.group: g.attempts for g in found.by_span}
    # <think> itself is answer (before the span opens); def thinking; </think> thinking; the rest answer
    assert spans == {"answer": 1 + 2 + 2, "thinking": 2}
    assert {g.group: g.samples for g in found.by_source} == {"humaneval": 1, "chat": 1}


def test_no_runs_and_the_json_round_trip():
    empty = where_lost({"d": []}, text)
    assert empty.drafts[0].attempts == 0 and empty.drafts[0].by_position == []
    assert empty.drafts[0].calibration[0].ece is None
    full = where_lost({"a": [run(1, [step(0, [1, 1], 1, [0.5, 0.5])])]}, text)
    assert WhereLost.from_dict(full.to_dict()) == full


def test_the_cli_view_over_a_stored_run_agrees_with_its_own_metrics(stored_run):
    """`lost --runs` on a stored replay: its P(a >= i) is the run's own per-position metric (computed
    by backend/run/metrics.py from the same steps), and a bad run id is one line, exit 2."""
    import json

    from backend.service.runs import get_run
    from tests.support.cli import run_cli

    db_url, run_id = stored_run
    done = run_cli("lost", "--runs", str(run_id), "--db", db_url, "--json")
    assert done.returncode == 0, done.stderr
    (draft,) = json.loads(done.stdout)["drafts"]
    run = get_run(db_url, run_id)
    stored = run.measured.per_position_marginal
    assert [p["marginal"] for p in draft["by_position"]] == pytest.approx(stored)
    assert draft["runs"] == 1 and draft["by_source"][0]["group"] == "typed prompt"
    assert sum(g["attempts"] for g in draft["by_kind"]) == draft["attempts"] > 0
    # every number as one table, each row naming its definition
    import pandas as pd

    out = Path(db_url[len("sqlite:///") :]).parent / "lost.parquet"
    done = run_cli("lost", "--runs", str(run_id), "--db", db_url, "--out", str(out))
    assert done.returncode == 0, done.stderr
    table = pd.read_parquet(out)
    positions = table[table["split"] == "by_position"]
    assert list(positions["group"]) == [f"d{p['position']}" for p in draft["by_position"]]
    assert set(table["definition"]) >= {"position_marginal", "group_rate", "calibration"}
    # issue 65 row 7: the top rejected tokens, the threshold what-if and the runs counted are in it too
    assert len(table[table["split"] == "top_rejected"]) == len(draft["top_rejected"])
    assert list(table[table["split"] == "runs"]["group"]) == [str(run_id)] and draft["run_ids"] == [run_id]
    whatif = table[table["split"] == "threshold_whatif"]
    assert len(whatif) == len(draft["threshold_whatif"]) and "as run" in set(whatif["group"])
    bad = run_cli("lost", "--runs", str(run_id), "--db", db_url, "--out", str(out.with_suffix(".xlsx")))
    assert bad.returncode == 2 and "--out writes .csv or .parquet" in bad.stderr
    # the same target named two ways (absolute, and relative to where a CLI ran) is one target
    import os

    from backend.service.database import open_database
    from backend.service.where_lost import where_lost_over
    from db import store

    with store.session_scope(open_database(db_url).factory) as session:
        relative = os.path.relpath(run.target_path)
        other = store.create_run(
            session,
            kind="replay",
            target_path=relative,
            draft_path=run.draft_path,
            params={},
            aux_hf_indices=[0],
        )
    assert where_lost_over(db_url, [run_id, other]).drafts[0].runs == 2
    # the page's choice: one run per draft and prompt, the one with the most verify steps, whichever
    # way the draft's path was spelled (a later, shorter run of the same prompt does not replace it)
    from backend.service.where_lost import choices, chosen_runs

    with store.session_scope(open_database(db_url).factory) as session:
        shorter = store.create_run(
            session, kind="replay", target_path=relative, draft_path=os.path.relpath(run.draft_path),
            params=dict(run.params), aux_hf_indices=[0], given=store.RunInput(prompt_ids=list(run.prompt_ids)),
        )  # fmt: skip
        store.finish_run(session, shorter, output_ids=[1], metrics={})
    offered = choices(db_url, run.target_path)
    assert list(offered.drafts) == [Path(run.draft_path).name] and offered.modes == ["chain greedy"]
    assert chosen_runs(db_url, offered, list(offered.drafts.values()), 3, None, "chain greedy") == [run_id]
    missing = run_cli("lost", "--runs", f"{run_id},99999", "--db", db_url)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "run 99999: no such run" in missing.stderr


def test_a_runs_source_is_read_from_its_samples_file_when_the_store_has_no_sample(tmp_path):
    """evaluate's runs name their sample as "file#index" (the index-th valid record): its source
    field is what the source split groups by (issue 55), never 'typed prompt'."""
    import json

    from backend.service.where_lost import _source_of

    path = tmp_path / "eval.jsonl"
    records = [{"input_ids": [1, 2], "loss_mask": [0, 1], "source": s} for s in ("HumanEval/0", "chat/1")]
    path.write_text("not json\n" + "\n".join(json.dumps(r) for r in records) + "\n")
    assert _source_of(f"{path}#1", False) == "chat/1"  # the bad first line is not counted
    assert _source_of("prompt", False) == "typed prompt" and _source_of(None, True) == "sample deleted"
    assert _source_of(f"{path}#9", False) == "eval.jsonl (source not read)"


def test_every_term_is_defined_once_in_the_one_definitions_with_the_numbers_the_code_uses():
    from backend.diagnostics.where_lost import BINS, MIN_ATTEMPTS
    from backend.diagnostics.where_lost_result import DEFINITIONS
    from backend.run import metrics

    assert all(metrics.DEFINITIONS[f"lost_{name}"] == text for name, text in DEFINITIONS.items())
    assert f"fewer than {MIN_ATTEMPTS} attempts" in DEFINITIONS["group_rate"]
    assert f"in {BINS} equal bins" in DEFINITIONS["calibration"]


def test_a_review_s_cases_tree_rows_the_prompt_nan_no_tokenizer_and_chains_only():
    """A tree's entropy is read at the accepted node's verify row; a <think> in the prompt or as the
    prefill's token opens the span; a NaN probability is not recorded (no crash); without a tokenizer
    no kind is guessed; calibration reads greedy chains only."""
    tree_step = step(0, [1, 1], 2, [0.9, 0.9])
    tree_step.tree = SimpleNamespace(accepted_path=[3, 5], target_entropies=[0.1, 9.0, 9.0, 3.0, 9.0, 0.2])
    (d1, d2) = where_lost({"d": [run(1, [tree_step], greedy=False)]}, text).drafts[0].by_entropy
    assert (d1.group, d1.attempts, d2.group, d2.attempts) == ("low (H < 0.5 nats)", 1, "high (H >= 2)", 1)

    opened = step(0, [1, 6], 2, [0.9, 0.9], committed=[1, 6, 7])
    opened.pending_token = 7
    thinking = LostRun(1, [opened], "chat", True, prompt_ids=(5,))  # the template put <think> in the prompt
    spans = {g.group: g.attempts for g in where_lost({"d": [thinking]}, text).drafts[0].by_span}
    assert spans == {"thinking": 2}  # def and </think> are read inside the span

    broken = step(0, [1, 1], 1, [float("nan"), 1.5], target_probs=[float("nan")] * 3)
    found = where_lost({"d": [run(1, [broken])]}, text).drafts[0]
    assert found.calibration[0].attempts == 1 and found.calibration[0].bins[9].attempts == 1  # 1.5 -> 1.0
    assert [g.group for g in found.by_confidence] == ["not recorded"]

    blind = where_lost({"d": [run(1, [broken])]}, None).drafts[0]
    assert [g.group for g in blind.by_kind] == ["unknown (no tokenizer)"] and blind.by_span == []
    assert any("tokenizer cannot be read" in note for note in blind.notes)

    sampled = where_lost({"d": [run(1, [step(0, [1, 1], 1, [0.5, 0.5])], greedy=False)]}, text).drafts[0]
    assert sampled.calibration[0].attempts == 0 and any("greedy-chain runs" in n for n in sampled.notes)


def test_a_probability_interval_stays_within_0_and_1():
    """Issue 65 row 14: Where lost said "[-0.05, 0.61]" for P(a >= i) over a few skewed samples."""
    from backend.run.metrics import mean_ci95

    low, high = mean_ci95([0.0, 0.0, 1.0])
    assert low < 0 < 1 < high  # the t interval as it is (an accept length may go where it likes)
    assert mean_ci95([0.0, 0.0, 1.0], bounds=(0.0, 1.0)) == [0.0, 1.0]


def test_the_downloaded_table_holds_the_rejected_tokens_the_what_if_and_the_runs():
    """Issue 65 row 7: the page's CSV left out the threshold what-if, the top rejected tokens and the run
    ids; every number on the page is in it now."""
    from backend.service.where_lost import where_lost_table

    runs = [
        run(4, [step(i, [1, 3], 1, [0.8, 0.4]) for i in range(3)]),
        run(7, [step(0, [1, 3], 2, [0.9, 0.9])]),
    ]
    found = where_lost({"d": runs}, text)
    table = where_lost_table(found)
    (top,) = table[table["split"] == "top_rejected"].itertuples()
    assert "'x' (id 7" in top.group and top.note.startswith("3 rejections; first at run 4 step 0")
    whatif = table[table["split"] == "threshold_whatif"]
    assert list(whatif["group"])[0] == "as run" and len(whatif) == len(found.drafts[0].threshold_whatif) > 1
    assert list(table[table["split"] == "runs"]["group"]) == ["4,7"]


def test_runs_of_very_different_lengths_are_said_to_weigh_differently_when_pooled():
    short = run(1, [step(0, [1, 1], 2, [0.9, 0.9])])
    long = run(2, [step(i, [1, 2], 1, [0.9, 0.9]) for i in range(4)])
    notes = where_lost({"d": [short, long]}, text).drafts[0].notes
    assert any("runs of 1 to 4 verify steps" in n and "longer runs weigh more" in n for n in notes)
    even = where_lost({"d": [long, run(3, long.steps[:3])]}, text).drafts[0].notes
    assert not any("verify steps: pooled" in n for n in even)
