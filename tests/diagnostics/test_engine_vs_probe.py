"""Issue 58 row 2: in one verdict, no engine finding writes a wiring the wiring probe rejects."""

from __future__ import annotations

from backend.diagnostics.findings import Finding

DECLARED = (2, 15, 27)  # the miswired draft's config, as SpecForge (its training reading) reads it


def report(*scores: tuple[tuple[int, ...], float]):
    """A probe over 8 samples (2,000 positions) whose candidates scored acc_0 `scores`, best first."""
    from backend.diagnostics.probe_report import Ranking  # torch: when a test runs, not collected
    from backend.diagnostics.probe_settings import Candidate

    candidates = [Candidate(wiring, "", [acc], 2000) for wiring, acc in scores]
    declared = next(c for c in candidates if c.aux_hf_indices == DECLARED)
    return Ranking(declared, candidates, 8)


def engine_wiring_against_probe(findings, probe, draft_dir=None):
    from backend.diagnostics.probe_findings import ProbeAnswer
    from backend.diagnostics.probe_findings import engine_wiring_against_probe as held

    return held(findings, ProbeAnswer.of_stored(probe.result("", "config", 1.0, 1, draft=draft_dir)))


def engine_finding(engine: str, fed: list[int]) -> Finding:
    """What cheap_checks.preflight_findings says for a serving engine: it feeds `fed`, the declared
    wiring (trained, as the config says) is written into the fix."""
    return Finding(
        "aux-wiring",
        "info",
        f"served by {engine}: feeds HF {fed}; trained on HF {list(DECLARED)}. Fix: ...",
        {"engine": engine, "fed": fed, "trained": list(DECLARED)},
        f"In the draft's config.json: top-level eagle_aux_hidden_state_layer_ids = {list(DECLARED)}",
    )


def test_a_separated_probe_answer_replaces_the_rejected_wiring_in_every_engine_finding():
    probe = report(((0, 2, 15), 0.41), (DECLARED, 0.12), ((1, 2, 15), 0.2))
    assert not probe.confirmed and probe.separated
    other = Finding("vocab", "warn", "something else")
    found = engine_wiring_against_probe(
        [engine_finding("vllm", [1, 14, 26]), other], probe, "drafts/miswired"
    )
    assert found[1] is other
    vllm = found[0]
    assert "[2, 15, 27]" not in vllm.fix and "[0, 2, 15]" in vllm.fix  # the probe's answer, not the rejected
    assert (
        "rejects the declared HF [2, 15, 27]" in vllm.message and "trained on HF [0, 2, 15]" in vllm.message
    )
    assert vllm.evidence["trained"] == [0, 2, 15] and vllm.evidence["declared"] == list(DECLARED)
    # an engine that already feeds the trained wiring has nothing to fix
    assert engine_wiring_against_probe([engine_finding("sglang", [0, 2, 15])], probe) == []


def test_a_tie_leaves_the_trained_wiring_unknown_and_writes_none():
    probe = report(((0, 2, 15), 0.41), ((0, 3, 15), 0.405), (DECLARED, 0.12))
    assert not probe.confirmed and not probe.separated
    (vllm,) = engine_wiring_against_probe([engine_finding("vllm", [1, 14, 26])], probe, "drafts/miswired")
    assert "not known yet" in vllm.message and vllm.evidence["trained"] is None
    assert "eagle_aux_hidden_state_layer_ids =" not in vllm.fix and "python -m backend probe" in vllm.fix


def test_a_confirmed_declared_wiring_leaves_the_findings_as_they_are():
    probe = report((DECLARED, 0.41), ((0, 2, 15), 0.12))
    findings = [engine_finding("vllm", [1, 14, 26])]
    assert engine_wiring_against_probe(findings, probe) == findings


def test_the_lint_of_a_serving_command_in_a_verdict_never_writes_the_rejected_wiring(tmp_path):
    """The walk's row 2 with `diagnose --vllm CMD`: the lint's aux-ids-field finding wrote the declared
    HF wiring into its fix beside the probe's rejection of it. The verdict's lint now runs with the
    probe's answer (here a probe kept with the pair, as on the cheap checks): it names the trained
    wiring and writes nothing else."""
    import json

    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.diagnostics.diagnose import DiagnoseOptions
    from backend.diagnostics.probe import ProbeSettings
    from backend.diagnostics.probe_report import Ranking
    from backend.diagnostics.probe_settings import Candidate
    from backend.service import kept_results
    from backend.service.diagnosis import diagnose

    db_url = f"sqlite:///{tmp_path / 'kept.db'}"
    draft = str(
        DEMO_DRAFTS / "miswired"
    )  # declares nested [1, 5, 8]: trained, as SpecForge reads it, on HF [2, 6, 9]
    trained, declared = Candidate((0, 2, 6), "", [0.58], 1000), Candidate((2, 6, 9), "", [0.13], 1000)
    probe = Ranking(declared, [trained, declared], 8)
    assert probe.separated
    kept_results.remember_probe(
        str(DEMO_TARGET),
        draft,
        probe.result("", "config", 1.0, 4, settings=ProbeSettings().describe([]), ran_by="a test"),
        db_url,
    )
    spec = json.dumps({"method": "eagle3", "model": draft, "num_speculative_tokens": 4})
    command = f"vllm serve {DEMO_TARGET} --speculative-config '{spec}'"
    result = diagnose(str(DEMO_TARGET), draft, None, DiagnoseOptions(vllm=command), db_url=db_url)
    fixes = [f.fix or "" for f in result.findings]
    assert not any("[2, 6, 9]" in fix for fix in fixes), fixes
    assert any("[0, 2, 6]" in fix for fix in fixes)
    (lint,) = [f for f in result.findings if "aux-ids-not-trained" in f.message]
    # what vLLM feeds, said as preflight says it: the CPU build's V1 runner and the GPU's V2 runner
    assert "HF [1, 5, 8] (its V1 runner, the CPU build) or HF [2, 6, 9] (its V2 runner" in lint.message
