"""`diagnose`'s verdict and findings (backend/service/diagnosis.py), drawn from the same object the CLI
prints with --json."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from backend.run.request import ENGINE_CHOICES
from ui import state
from ui.html import md
from ui.numbers import setting_number, whole
from ui.pickers import first_samples
from ui.tables import evidence_table, title

SHOW = {"ok": st.success, "unverified": st.info, "suspect": st.warning, "broken": st.error}
WORDS = {"ok": "OK", "unverified": "Unverified", "suspect": "Suspect", "broken": "Broken"}
FEATURES_HELP = (
    "A SpecForge feature file from the run that trained the active draft. With it the verdict compares "
    "what serving feeds with what training fed, without samples; without it only the wiring probe (on "
    "samples) can see the wiring. A file from another draft's training says nothing about this one."
)
BUNDLED_FEATURES = {  # what each bundled pair's feature files are
    "toy": " The toy pair's demo/data/features/data_*.ckpt are its miswired draft's training features.",
    "smollm2": " The SmolLM2 pair's demo/smollm2/data/features/data_0.ckpt was fed the declared wiring "
    "HF [2, 15, 27] (final's and epoch1's training), not miswired's: with miswired it cannot show the gap.",
}


def features_help(target_path: str) -> str:
    """The feature file's help for the active pair: which bundled file belongs to which draft."""
    from backend.defaults import PAIRS

    here = Path(target_path).resolve()
    pair = next((p for p in PAIRS if p.target.resolve() == here), None)
    return FEATURES_HELP + (BUNDLED_FEATURES.get(pair.key, "") if pair else "")


ICONS = {"fail": "**fail**", "warn": "**warn**", "info": "info"}


def show_diagnosis(result, stale: str | None = None) -> None:
    """`result`: diagnose's DiagnosisResult (backend/diagnostics/findings.py)."""
    # "ok" from checks none of which can see the wiring is not shown as healthy
    level = "unverified" if result.verdict == "ok" and not result.wiring_seen else result.verdict
    headline = result.headline
    if level == "unverified":  # the CLI's headline says it too: "No cause found, but unverified: ..."
        headline = headline.replace(", but unverified:", ":", 1)
    text = f"**{WORDS[level]}**: {md(headline)}"
    if stale:
        text = f"*{md(stale)}*\n\n" + text
    SHOW[level](text)
    if result.next_step:
        st.info(f"**Next:** {md(result.next_step)}.")
    st.caption(
        f"Read as {md(result.engine)}; aux HF indices {result.aux_hf_indices}; "
        f"{result.n_samples} samples. Checks: "
        + "; ".join(f"{md(k)}: {md(str(v))}" for k, v in result.checks.items())
    )
    measured = result.measured
    if measured:
        predicted = measured.predicted_accept_length
        st.metric(
            "Live accept length (measured)",
            f"{measured.live_accept_length:.2f}",
            delta=None if predicted is None else f"teacher-forced prediction {predicted:.2f}",
            delta_color="off",
            help=f"{measured.definition}. {measured.samples} samples, {measured.verify_steps} verify steps, "
            f"{measured.max_new_tokens} new tokens each; assuming {measured.assumes}.",
        )
        st.caption(f"Live replays assumed {md(measured.assumes)}.")
    for finding in result.findings:
        label = f"{ICONS[finding.severity]} · {finding.cls} · {md(title(finding.message))}"
        with st.expander(label, expanded=finding.severity == "fail"):
            st.markdown(md(finding.message))
            if finding.fix:
                st.markdown(f"**Fix:** {md(finding.fix)}")
            evidence_table(finding.evidence)
    fix_and_measure(result)
    report_downloads(result)


def fix_and_measure(result) -> None:
    """For each engine a wiring finding names a fix for: one action that writes the fix to a copy and
    replays the draft and the copy read as that engine (backend/service/fix_measure.py), before and after."""
    from backend.service import fix_measure
    from ui.taskview import task_panel

    fixes = {
        f.evidence["engine"]: f.evidence["trained"]
        for f in result.findings
        if f.cls == "aux-wiring" and f.evidence.get("engine") and f.evidence.get("trained")
    }
    if not fixes:
        return
    st.markdown("**Apply a fix and measure again**")
    columns = st.columns(len(fixes) + 1)
    for column, (engine, trained) in zip(columns, fixes.items(), strict=False):
        if column.button(
            f"Fix for {engine}: write a copy and measure it",
            key=f"fix_measure_{engine}",
            help=f"Writes the fix ({engine} fed HF {trained}) into a copy of the draft under the data folder's "
            f"fixed/, then replays the draft and the copy on {fix_measure.SAMPLES} samples of the pair's eval "
            f"set read as {engine}: the accept length before and after, and the command that holds the copy "
            "against the engine itself.",
        ):
            st.session_state["fix_measure_task"] = fix_measure.fix_measure_job.start(
                state.db(), result.target, result.draft, engine, list(trained)
            )
    task_panel("fix_measure_task", lambda measured: st.info(md(measured.said)), adopt="fix-measure")


def report_downloads(result) -> None:
    """The diagnosis as one file to attach to an issue (backend/service/diagnosis_report.py), written when
    a button is pressed: its newest run's steps are read then, not on every rerun of the page."""
    from backend.service import diagnosis_report as report

    def written(html: bool):
        found = report.diagnosis_report(result, state.db())
        return report.report_html(found) if html else report.report_json(found)

    name = f"speclens-diagnosis-{Path(result.draft).name or 'draft'}"
    left, right, _ = st.columns([1, 1, 2])
    left.download_button(
        "Download the report (HTML)", lambda: written(True), f"{name}.html", "text/html", key="diagnosis_html",
        help="The verdict, its findings and fixes, the checks, the probe's table and the first verify steps of "
        "this pair's newest run, as one page to attach to an issue",
    )  # fmt: skip
    right.download_button(
        "Download the report (JSON)", lambda: written(False), f"{name}.json", "application/json",
        key="diagnosis_json",
    )  # fmt: skip


def diagnose_form() -> tuple[list, dict] | None:
    """The samples and `diagnose` options the user asked for, when they pressed Diagnose (else None).
    A serving command names its engine: it is read as that engine (backend.service.diagnosis)."""
    cheap = st.checkbox(
        "Cheap checks only: no samples (preflight, the engines' readings, the lint, the draft's head, and "
        "train vs serve with a feature file); seconds instead of minutes",
        key="diagnose_cheap",
    )
    samples = [] if cheap else first_samples("diagnose", default_n=8)
    left, middle, right = st.columns(3)
    engine = left.selectbox("Read it as", ENGINE_CHOICES, key="diagnose_engine")
    context = whole(
        middle, "Served context (0: skip the curve)", 0, 1_000_000, 0, "diagnose_context", step=256
    )
    steps = setting_number(right, "num_steps", "diagnose_steps")
    command = st.text_input(
        "Serving command (optional): an SGLang launch command, or vLLM arguments starting with `vllm serve`",
        "",
        key="diagnose_command",
    ).strip()
    features = st.text_input(  # keyed by the draft: a feature file says what one training run fed
        "Training features of this draft (optional .ckpt)",
        "",
        key=f"diagnose_features_{abs(hash(state.draft_path()))}",
        help=features_help(state.target_path()),
    ).strip()
    served = st.text_input(
        "The server's own numbers (optional): a file path or URL",
        "",
        key="diagnose_served",
        help="An SGLang server log, a vLLM /metrics scrape, or per-request responses (vLLM, SGLang, llama.cpp's "
        "timings, TensorRT-LLM): the verdict puts the server's accept length beside the replay's under the "
        "wiring that engine reads and the one the probe finds, and reads the draft as that engine does. "
        "Needs samples.",
    ).strip()
    ready = samples is not None and None not in (context, steps)
    if not st.button("Diagnose", key="diagnose_run", type="primary", disabled=not ready):
        return None
    is_vllm = "vllm" in command.split()[:2]
    return samples, {
        "engine": "auto" if command else engine,
        "context": int(context) or None,
        "num_steps": int(steps),
        "sglang": command if command and not is_vllm else None,
        "vllm": command if command and is_vllm else None,
        "features": features or None,
        "served": served or None,
    }
