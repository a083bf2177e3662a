"""The shared verdict: cheap signals never call a draft healthy on the declared wiring's word, the
probe and the train-vs-serve diff name the trained layers, and each verdict names the next check."""

from __future__ import annotations

from backend.diagnostics.verdict import summarise

PASSED = {
    "ok": True,
    "aux_hf_indices": [2, 4, 5],
    "checks": [{"name": "shapes", "status": "pass", "message": ""}],
}
PROBE_REJECTED = {
    "confirmed": False,
    "best": {"aux_hf_indices": [0, 2, 4]},
    "verdict": "trained on HF [0, 2, 4]",
}
PROBE_CONFIRMED = {"confirmed": True, "best": {"aux_hf_indices": [2, 4, 5]}, "verdict": "declared is trained"}


def test_a_failed_preflight_is_the_whole_story():
    failed = {
        "ok": False,
        "checks": [{"name": "fc.weight", "status": "fail", "message": "width 96 != 3 x 32"}],
    }
    verdict = summarise(failed, [], None, None, PROBE_CONFIRMED)
    assert verdict.level == "error" and "fc.weight: width 96" in verdict.headline
    assert verdict.next_check == "fix the checkpoint"


def test_cheap_checks_that_pass_leave_the_wiring_unverified_and_point_at_the_probe():
    verdict = summarise(PASSED, [], None, "no training feature file", None)
    assert verdict.level == "unverified" and "passed" not in verdict.headline
    assert verdict.next_check == "wiring probe" and "passes every check above" in verdict.next_why
    assert verdict.signals == {
        "preflight": "passed",
        "config lint": "passed",
        "wiring probe": "not run",
        "train vs serve": "no training feature file",
    }


def test_the_probe_decides_the_wiring():
    rejected = summarise(PASSED, [], None, None, PROBE_REJECTED)
    assert rejected.level == "error" and "trained on HF [0, 2, 4]" in rejected.headline
    assert "declared (and served) with HF [2, 4, 5]" in rejected.headline and rejected.next_check is None
    confirmed = summarise(PASSED, [], None, None, PROBE_CONFIRMED)
    assert confirmed.level == "ok" and confirmed.next_check is None


def test_a_train_vs_serve_mismatch_names_the_training_layers_and_asks_the_probe_to_confirm():
    diff = {
        "serving_aux_hf_indices": [2, 4, 5],
        "first_mismatch": {"chunk": "chunk0 (serve HF 2)", "position": 0},
        "training_aux_hf_indices": [0, 2, 4],
    }
    verdict = summarise(PASSED, [], diff, "f.ckpt", None)
    assert verdict.level == "error" and "trained on HF [0, 2, 4]" in verdict.headline
    assert verdict.next_check == "wiring probe"
    unknown = summarise(PASSED, [], {**diff, "training_aux_hf_indices": [None, 2, 4]}, "f.ckpt", None)
    assert unknown.level == "error" and "not the ones the draft was trained on" in unknown.headline
    equal = summarise(PASSED, [], {**diff, "first_mismatch": None}, "f.ckpt", None)
    assert equal.level == "ok" and equal.signals["train vs serve"] == "equal"


def test_lint_errors_and_warnings_count():
    error = {"severity": "error", "code": "missing-d2t", "message": "no d2t", "engine": "vLLM"}
    warning = {
        "severity": "warning",
        "code": "aux-ids-convention",
        "message": "one above",
        "engine": "SGLang",
    }
    assert summarise(PASSED, [error], None, None, PROBE_CONFIRMED).level == "error"
    verdict = summarise(PASSED, [warning], None, None, PROBE_CONFIRMED)
    assert verdict.level == "warning" and any("aux-ids-convention" in r for r in verdict.reasons)


def test_wirings_the_probe_cannot_tell_apart_are_named_and_the_diff_settles_them():
    tied = {**PROBE_REJECTED, "as_good_as_best": [[0, 1, 4]]}
    verdict = summarise(PASSED, [], None, None, tied)
    assert (
        "trained on HF [0, 2, 4] (or HF [0, 1, 4], as good on the probe's samples), but" in verdict.headline
    )
    diff = {
        "serving_aux_hf_indices": [2, 4, 5],
        "first_mismatch": {"chunk": "chunk0 (serve HF 2)", "position": 0},
        "training_aux_hf_indices": [0, 1, 4],
    }
    settled = summarise(PASSED, [], diff, "f.ckpt", tied)
    assert "trained on HF [0, 1, 4], but" in settled.headline  # the features themselves decide
    elsewhere = summarise(PASSED, [], {**diff, "training_aux_hf_indices": [0, 3, 4]}, "f.ckpt", tied)
    assert "trained on HF [0, 2, 4] (or HF [0, 1, 4]" in elsewhere.headline


def test_the_next_step_reads_as_a_sentence():
    from backend.diagnostics.verdict import Verdict

    assert (
        Verdict("error", "x", next_check="fix the checkpoint").to_dict()["next_step"] == "fix the checkpoint"
    )
    assert Verdict("unverified", "x", next_check="wiring probe").next_step == "run the wiring probe"
    assert Verdict("ok", "x").to_dict()["next_step"] is None


def test_the_lint_signal_counts_its_errors_and_never_reads_passed_beside_them():
    """Issue 31 item 5: 'lint: passed' was shown beside two lint errors (neither about aux ids)."""
    findings = [
        {"severity": "error", "code": "num-draft-tokens", "message": "x", "engine": "sglang"},
        {"severity": "error", "code": "topk", "message": "y", "engine": "sglang"},
        {"severity": "warning", "code": "dtype", "message": "z", "engine": "sglang"},
    ]
    verdict = summarise(PASSED, findings, None, None, None)
    assert verdict.signals["config lint"] == "2 errors, 1 warning" and verdict.level == "error"
    assert summarise(PASSED, findings[2:], None, None, None).signals["config lint"] == "1 warning"
    assert summarise(PASSED, None, None, None, None).signals["config lint"] == "not run"
