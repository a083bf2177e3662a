"""The inline serving-flag lint the Diagnostics page runs (no model is loaded)."""

from __future__ import annotations

import pytest

from backend import BadInput
from backend.diagnostics.probe_settings import ProbeResult
from backend.service.reference_spec import ReferenceSpec
from tests.support.lint import CHAIN, make_draft, make_lint_target, sglang


def test_lint_for_either_engine(tmp_path):
    import json

    from backend.service.serving_lint import lint

    target, draft = make_lint_target(tmp_path / "target"), make_draft(tmp_path, "good", aux_ids=[1, 15, 28])
    report = lint(
        str(draft), sglang(draft, CHAIN, "--context-length 2048", target=target), "SGLang", str(target)
    )
    assert report.findings == [] and report.effective == {
        "num_steps": 3,
        "topk": 1,
        "num_draft_tokens": 4,
    }
    config = json.dumps({"method": "eagle", "model": str(draft), "num_speculative_tokens": 1})
    report = lint(str(draft), f"vllm serve m --speculative-config '{config}'", "vLLM", None)
    assert {"eagle-algorithm-eagle3-draft", "single-draft-step"} <= {f.code for f in report.findings}
    with pytest.raises(BadInput, match="no --speculative-algorithm"):
        lint(str(draft), "python -m sglang.launch_server --model-path x", "SGLang", None)


def test_the_cheap_diagnosis_of_the_bundled_miswired_draft():
    """Issue 41: the cheap verdict is `diagnose` without samples. Without training features it cannot
    see the miswiring and says so, with the next step; with the draft's own training features it names
    the trained layers, the fix writing them for both engines. Once the probe has rejected the declared
    wiring, the lint never suggests the declared layers."""
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.diagnostics.diagnose import DiagnoseOptions
    from backend.drafts.reading_fixes import wiring_fix
    from backend.service import kept_results, serving_lint
    from backend.service.diagnosis import diagnose
    from tests.support.demo import demo_wiring

    trained, declared = demo_wiring()
    target, draft = str(DEMO_TARGET), str(DEMO_DRAFTS / "miswired")
    blind = diagnose(target, draft)  # vLLM's V1 runner misreads its nested ids: a warning (issue 65 row 3)
    assert blind.verdict == "suspect" and not blind.wiring_seen
    assert blind.headline.startswith("aux-wiring: served by vllm") and blind.next_step
    assert blind.headline.endswith("and unverified: no check that ran can see the wiring")
    features = str(DEMO_TARGET.parent / "data" / "features" / "data_0.ckpt")
    seen = diagnose(target, draft, options=DiagnoseOptions(features=features))
    assert seen.verdict == "broken" and seen.wiring_seen and seen.next_step is None
    (wiring,) = [f for f in seen.findings if f.severity == "fail"]
    assert wiring.cls == "aux-wiring" and f"trained on HF {trained}" in wiring.message
    assert all(wiring_fix(engine, trained)[0] in wiring.fix for engine in ("sglang", "vllm"))
    with pytest.raises(BadInput, match="no such training feature file"):
        diagnose(target, draft, options=DiagnoseOptions(features=features + ".missing"))
    vllm = f'vllm serve {target} --speculative-config \'{{"method": "eagle3", "model": "{draft}"}}\''
    assert str(declared) in " ".join(f.fix for f in serving_lint.lint(draft, vllm, "vLLM", target).findings)
    kept_results.remember_probe(
        target,
        draft,
        ProbeResult.from_dict({"confirmed": False, "best": {"aux_hf_indices": trained}, "verdict": "x"}),
    )
    assert kept_results.trained_wiring(target, draft) == trained
    fixes = " ".join(f.fix for f in serving_lint.lint(draft, vllm, "vLLM", target).findings)
    assert str(trained) in fixes and str(declared) not in fixes


def test_the_lint_of_a_bin_draft_reads_its_weights_in_the_reader(tmp_path):
    """A pytorch_model.bin draft: the lint's facts (d2t present, fc's width) come from the reader
    process (only torch reads a pickle), and the findings equal those of the same draft as safetensors."""
    import shutil

    import torch
    from safetensors.torch import load_file

    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.service import serving_lint

    bin_draft = tmp_path / "final_bin"
    bin_draft.mkdir()
    shutil.copy(DEMO_DRAFTS / "final" / "config.json", bin_draft / "config.json")
    torch.save(load_file(str(DEMO_DRAFTS / "final" / "model.safetensors")), bin_draft / "pytorch_model.bin")
    facts = serving_lint._bin_draft_facts(str(bin_draft))
    assert facts is not None and facts.has_d2t and facts.fc_input_width == 3 * facts.config.target_hidden_size
    assert serving_lint._bin_draft_facts(str(DEMO_DRAFTS / "final")) is None  # safetensors: read from headers

    def findings(draft):
        command = (
            f'vllm serve {DEMO_TARGET} --speculative-config \'{{"method": "eagle3", "model": "{draft}"}}\''
        )
        return [
            (f.code, f.severity)
            for f in serving_lint.lint(str(draft), command, "vLLM", str(DEMO_TARGET)).findings
        ]

    assert findings(bin_draft) == findings(DEMO_DRAFTS / "final")


def test_a_probe_outlives_the_server_that_ran_it(tmp_path, db_url):
    """Issue 43 row 5: a probe kept in the database is what a later server (nothing in memory) opens
    Decode's reference on, and the lint reads; once the draft's files change it is not reused."""
    import os
    import shutil

    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.service import kept_results, reference_spec

    draft = tmp_path / "miswired"
    shutil.copytree(DEMO_DRAFTS / "miswired", draft)
    target = str(DEMO_TARGET)
    # a probe as an older version stored it: the keys it lacks read with their defaults
    found = ProbeResult.from_dict(
        {"confirmed": False, "best": {"aux_hf_indices": [0, 2, 6]}, "as_good_as_best": [[0, 3, 6]]}
    )
    before = reference_spec.default_reference(target, str(draft), None, db_url)
    assert before.aux_hf_indices != [0, 2, 6]
    kept_results.remember_probe(target, str(draft), found, db_url)
    kept_results._PROBES.clear()  # a new server: only the database remembers
    assert kept_results.known_probe(target, str(draft)) is None
    assert kept_results.trained_wirings(target, str(draft), db_url) == [[0, 2, 6], [0, 3, 6]]
    reference = reference_spec.default_reference(target, str(draft), None, db_url)
    assert reference == ReferenceSpec(
        "wiring", [0, 2, 6], why="the wiring probe's best, tied with 1 it cannot tell apart"
    )
    config = draft / "config.json"
    os.utime(config, (config.stat().st_atime, config.stat().st_mtime + 10))  # the draft changed
    assert kept_results.known_probe(target, str(draft), db_url) is None
    kept_results.remember_probe(
        target, str(draft), found, "sqlite:////nonexistent-dir/x.db"
    )  # kept in memory
    assert kept_results.trained_wiring(target, str(draft)) == [0, 2, 6]


def test_a_probe_the_cli_ran_is_kept_and_the_largest_probe_is_the_one_used(tmp_path, db_url):
    """Issue 58 row 18: the 32-sample probe the fix recommends, run on the CLI, was not kept; the
    pages kept the page's 8-sample probe. The CLI keeps its probes with the pair, and the probe on the
    most samples is the one every view reads."""
    import json
    import shutil

    from backend.defaults import DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET
    from backend.service import kept_results
    from tests.support.cli import run_cli

    draft = tmp_path / "miswired"
    shutil.copytree(DEMO_DRAFTS / "miswired", draft)
    target = str(DEMO_TARGET)
    small = ProbeResult.from_dict(
        {"confirmed": False, "best": {"aux_hf_indices": [0, 4, 6]}, "tied": [[0, 4, 6]], "n_samples": 1}
    )
    kept_results.remember_probe(target, str(draft), small, db_url)  # the page's probe, on fewer samples
    args = ["probe", "--target", target, "--draft", str(draft), "--samples", str(DEMO_EVAL)]
    done = run_cli(*args, "--limit", "2", "--budget", "2", "--db", db_url, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    ran = json.loads(done.stdout)
    kept = kept_results.known_probe(target, str(draft), db_url)
    assert kept.ran_by == "the CLI's probe" and kept.n_samples == 2 and kept.tied == ran["tied"]
    kept_results._PROBES.clear()  # a new server reads the database: still the larger one
    assert kept_results.known_probe(target, str(draft), db_url).n_samples == 2
