"""Issue 58 row 10: the cheap checks (no samples) said 'No cause found' while a wiring probe kept with
the pair rejected the declared wiring; they now use its answer."""

from __future__ import annotations

import shutil


def test_a_kept_probe_s_answer_is_the_cheap_verdict_s(tmp_path, db_url):
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.diagnostics.probe_settings import ProbeResult
    from backend.service import kept_results
    from backend.service.diagnosis import diagnose

    draft = tmp_path / "miswired"
    shutil.copytree(DEMO_DRAFTS / "miswired", draft)
    target = str(DEMO_TARGET)
    before = diagnose(target, str(draft), [], db_url=db_url)
    assert before.verdict != "broken" and "unverified" in before.headline
    kept = {
        "confirmed": False, "separated": False, "best": {"aux_hf_indices": [0, 2, 6]},
        "tied": [[0, 2, 6], [0, 1, 6]], "declared": {"aux_hf_indices": [2, 6, 9]}, "n_samples": 8,
        "how_to_separate": "8 samples cannot tell HF [0, 2, 6] / HF [0, 1, 6] apart", "ran_by": "the probe tab",
    }  # fmt: skip
    kept_results.remember_probe(target, str(draft), ProbeResult.from_dict(kept), db_url)
    kept_results._PROBES.clear()  # a reload: only the database keeps it
    after = diagnose(target, str(draft), [], db_url=db_url)
    assert after.verdict == "broken" and after.headline.startswith("aux-wiring: the draft was trained on")
    assert "kept with this pair" in after.headline and after.checks["wiring probe"].startswith("ran earlier")
    engines = [f for f in after.findings if "served by" in f.message]
    assert engines and all("[2, 6, 9]" not in (f.fix or "") for f in engines)  # none writes the rejected
