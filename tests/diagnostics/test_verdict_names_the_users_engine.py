"""Issue 65 row 3: an engine that misreads the draft is the cause for a user who serves with it (the
serving command's engine or --engine: a fail), and a warning when no engine is named, never an info
under an "OK" verdict; the finding says its fix once. The bundled `final` declares SpecForge's nested
ids only, which vLLM 0.32's V1 runner reads as HF indices (one layer low): on SmolLM2 HF [1, 14, 26]
for [2, 15, 27]; on the toy pair (the tests' default) HF [1, 5, 8] for [2, 6, 9]."""

from __future__ import annotations

import pytest

from backend.defaults import DEMO_DRAFTS, DEMO_TARGET


@pytest.fixture(scope="module")
def report() -> dict:
    from backend.engine.preflight import preflight  # transformers: not at collection

    return preflight(str(DEMO_DRAFTS / "final"), str(DEMO_TARGET)).result().to_dict()


def preflight_findings(report: dict, engine: str):
    from backend.diagnostics.diagnose import preflight_findings as findings  # torch: not at collection

    return findings(report, engine)


def verdict(findings) -> tuple[str, str]:
    """(verdict, headline) of a diagnosis whose preflight ran and found `findings`."""
    from backend.diagnostics.diagnose import Diagnosis

    diagnosis = Diagnosis(findings, {"preflight": "ran"})
    return diagnosis.verdict, diagnosis.headline


def _wiring(findings):
    return [f for f in findings if f.cls == "aux-wiring"]


def test_with_no_engine_named_a_misreading_engine_is_a_warning_and_the_verdict_not_ok(report):
    findings = preflight_findings(report, "auto")
    wiring = _wiring(findings)
    (vllm,) = [fix for fix in report["serving_fixes"] if fix["engine"] == "vllm"]
    assert [i - 1 for i in vllm["trained"]] == vllm["fed"]  # one layer low
    assert [f.severity for f in wiring] == ["warn"] and f"feeds HF {vllm['fed']}" in wiring[0].message
    assert "Fix" not in wiring[0].message  # said once, as the fix
    assert f'"eagle_aux_hidden_state_layer_ids": {vllm["trained"]}' in wiring[0].fix
    said, headline = verdict(findings)
    assert said == "suspect" and headline.startswith("aux-wiring: served by vllm")


def test_serving_with_the_engine_that_misreads_it_makes_it_the_cause(report):
    assert [f.severity for f in _wiring(preflight_findings(report, "vllm"))] == ["fail"]
    assert verdict(preflight_findings(report, "vllm"))[0] == "broken"


def test_serving_with_an_engine_that_reads_it_right_says_nothing_of_the_others(report):
    assert _wiring(preflight_findings(report, "sglang")) == []
    assert _wiring(preflight_findings(report, "vllm-v2")) == []
