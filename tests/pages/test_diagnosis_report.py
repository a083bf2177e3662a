"""Issue 65 row 22: one diagnosis as one file to attach to an issue (backend/service/diagnosis_report.py):
the verdict, its findings and fixes, the probe's table and the first verify steps of the pair's newest
run, as JSON and as one HTML page with every string escaped; on the page, two download buttons under
the verdict; on the CLI, `diagnose --report FILE`."""

from __future__ import annotations

import json

from tests.pages.test_compare import LT, NEWLINE, SELF, SPACE, store_run
from tests.support.pages import ok, page

HOSTILE = "<script>alert(1)</script>"


def verdict(target: str, draft: str):
    from backend.diagnostics.findings import DiagnosisResult

    return DiagnosisResult.from_dict(
        {
            "verdict": "broken",
            "headline": f"aux-wiring: {HOSTILE}",
            "findings": [
                {"class": "aux-wiring", "severity": "fail", "message": f"fed {HOSTILE}", "fix": "write <x>"}
            ],
            "checks": {"preflight": "ran"},
            "probe": {
                "verdict": "the probe's words",
                "candidates": [{"aux_hf_indices": [0, 2, 6], "loss": 3.7, "acc_step0": 0.58, "label": "<b>"}],
            },
            "target": target,
            "draft": draft,
            "engine": "sglang",
            "aux_hf_indices": [2, 6, 9],
        }
    )


def test_the_report_holds_the_verdict_the_probe_and_the_newest_run_s_steps_escaped(db):
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.service.diagnosis_report import diagnosis_report, report_html, report_json

    store_run(db, "final", [{"position": 2, "drafted": [SELF, SPACE], "accepted": 2, "bonus": NEWLINE}])
    newest = store_run(
        db, "final", [{"position": 2, "drafted": [SELF, LT], "accepted": 1, "bonus": SPACE}]
    )  # the newest finished run of the pair is the one shown
    report = diagnosis_report(verdict(str(DEMO_TARGET), str(DEMO_DRAFTS / "final")), db)
    excerpt = report["run_excerpt"]
    assert excerpt["run_id"] == newest and [s["accepted"] for s in excerpt["steps"]] == [1]
    assert len(excerpt["steps"][0]["drafted"]) == 2 and len(excerpt["steps"][0]["target"]) == 3
    back = json.loads(report_json(report))
    assert (
        back["diagnosis"]["headline"].endswith(HOSTILE)
        and back["diagnosis"]["findings"][0]["fix"] == "write <x>"
    )
    page_text = report_html(report)
    assert HOSTILE not in page_text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page_text
    assert "write &lt;x&gt;" in page_text and "<td>&lt;b&gt;</td>" in page_text
    assert f"The first verify steps of run {newest}" in page_text
    assert (
        diagnosis_report(verdict(str(DEMO_TARGET), str(DEMO_DRAFTS / "final")), None)["run_excerpt"] is None
    )


def test_the_verdict_on_the_page_offers_the_report_and_the_cli_writes_it(db, tmp_path):
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.service import kept_results
    from tests.support.cli import run_cli

    kept_results.remember_verdict(verdict(str(DEMO_TARGET), str(DEMO_DRAFTS / "final")), db)
    app = ok(page("4_Diagnostics").run())
    labels = [b.label for b in app.get("download_button")]
    assert "Download the report (HTML)" in labels and "Download the report (JSON)" in labels
    out = tmp_path / "report.html"
    done = run_cli(
        "diagnose", "--target", str(DEMO_TARGET), "--draft", str(DEMO_DRAFTS / "miswired"), "--db", db,
        "--report", str(out),
    )  # fmt: skip
    assert done.returncode == 0 and f"report: {out}" in done.stdout
    assert out.read_text().startswith("<!doctype html>") and "SpecLens diagnosis" in out.read_text()
    refused = run_cli(
        "diagnose", "--target", str(DEMO_TARGET), "--draft", str(DEMO_DRAFTS / "miswired"),
        "--report", str(tmp_path / "no" / "such" / "dir" / "r.json"),
    )  # fmt: skip
    assert (
        refused.returncode == 2
        and refused.stderr.count("\n") == 1
        and "cannot write the report" in refused.stderr
    )
