"""Name the cause, not the symptom: one verdict over every failure class users report
(docs/reference.md §13).

`diagnose` runs the cheap checks first (preflight, the engines' readings, the serving-flag lint,
the vocabulary, the context window, the target's precision), then with samples the wiring probe, the
reading probe, the chat-template comparison, live replays (train-vs-serve gap, repetition) and, with
`context`, an accept-length-by-context curve. Each finding has a class from CLASSES (part of the CLI
contract), a severity (fail | warn | info), a message, its evidence and the fix. The verdict: broken
with any fail, suspect with any warn, ok otherwise; the headline is the worst finding's message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from backend.data.served_acceptance import ServedAcceptance
from backend.diagnostics.cheap_checks import (
    context_findings,
    precision_findings,
    preflight_findings,
    vocab_findings,
)
from backend.diagnostics.draft_head import head_findings
from backend.diagnostics.findings import SEVERITIES, DiagnosisResult, Finding, LiveMeasure, severity
from backend.diagnostics.hidden_diff import train_vs_serve
from backend.diagnostics.penalty_check import penalty_findings
from backend.diagnostics.probe import ProbeResult, ProbeSettings, run_probe
from backend.diagnostics.probe_findings import (
    ProbeAnswer,
    engine_wiring_against_probe,
    reading_findings,
    stored_probe_findings,
    wiring_findings,
)
from backend.diagnostics.reading_probe import run_reading_probe
from backend.diagnostics.sample_checks import (
    context_curve,
    live_findings,
    predicted_accept_length,
    template_findings,
)
from backend.diagnostics.train_serve import train_serve_findings
from backend.run.records import Progress, no_progress
from backend.run.wiring import Wiring

CLASSES = (
    "aux-wiring",
    "variant-flags",
    "vocab-mapping",
    "rope / context-window",
    "position-offset",
    "chat-template",
    "repetition",
    "serving-flags",
    "precision",
    "train-serve-gap",
    "no-acceptance",
    "synthetic-acceptance",
    "draft-head",
    "sampling-penalties",
    "structured-output",
    "lora",
    "prefix-cache",
    "disaggregation",
    "served-numbers",
)
# preflight check name -> the class its failure belongs to


@dataclass
class Diagnosis:
    findings: list[Finding]
    ran: dict  # check -> what it did ("ran", "skipped: why")
    measured: LiveMeasure | None = None  # the live replays' accept length, with the wiring and reading
    probe: ProbeResult | None = None  # the wiring probe's report and settings (the probe tab reuses it)

    @property
    def wiring_seen(self) -> bool:
        """Whether a check that can see which layers the draft was trained on ran: the wiring probe,
        or the train-vs-serve diff. Preflight and the lint take the declared layers as the trained
        ones, so without either a verdict cannot call the wiring healthy."""
        return any(
            str(self.ran.get(check, "")).startswith("ran") for check in ("wiring probe", "train vs serve")
        )

    @property
    def next_step(self) -> str | None:
        """What to run next when nothing that sees the wiring ran (and the draft loads)."""
        if self.wiring_seen or self.ran.get("preflight") != "ran":
            return None
        return (
            "Diagnose on samples (the wiring probe) or with the draft's training features: preflight and the "
            "lint take the declared layers as the trained ones, so a draft declared with the wrong layers "
            "passes every check that ran"
        )

    @property
    def verdict(self) -> str:
        severities = {f.severity for f in self.findings}
        return "broken" if "fail" in severities else "suspect" if "warn" in severities else "ok"

    @property
    def headline(self) -> str:
        for level in ("fail", "warn"):
            worst = sorted(  # a draft that accepts nothing is said first, whatever else is found
                (f for f in self.findings if f.severity == level), key=lambda f: f.cls != "no-acceptance"
            )
            if worst:
                more = (
                    f" (+{len(worst) - 1} more {level} finding{'s' * (len(worst) > 2)})"
                    if len(worst) > 1
                    else ""
                )
                blind = level == "warn" and self.next_step is not None  # a warning is not all there is
                said = f"{worst[0].cls}: {worst[0].message}{more}"
                return (
                    said.rstrip(".") + "; and unverified: no check that ran can see the wiring"
                    if blind
                    else said
                )
        skipped = [k for k, v in self.ran.items() if str(v).startswith("skipped")]
        if not self.wiring_seen:
            return "No cause found, but unverified: no check that ran can see the wiring" + (
                f" (not run: {', '.join(skipped)})" if skipped else ""
            )
        return "No cause found: every check that ran passed" + (
            f" (not run: {', '.join(skipped)})" if skipped else ""
        )

    def result(self, **pair) -> DiagnosisResult:
        """The verdict as the CLI prints it and the page draws it, findings worst first; `pair`: the
        target, draft and reading it ran on (DiagnosisResult's fields)."""
        order = {s: i for i, s in enumerate(SEVERITIES)}
        return DiagnosisResult(
            verdict=self.verdict,
            headline=self.headline,
            findings=sorted(self.findings, key=lambda f: order[f.severity]),
            checks=self.ran,
            measured=self.measured,
            probe=self.probe,
            wiring_seen=self.wiring_seen,
            next_step=self.next_step,
            classes=list(CLASSES),
            **pair,
        )


@dataclass(frozen=True)
class DiagnoseOptions:
    """How a diagnosis runs (the CLI's flags): the serving command whose flags are linted and whose
    engine's reading is tested, the served context to test, K, the live replays, the probe's budget,
    and where the models load."""

    sglang: str | None = None
    vllm: str | None = None
    context: int | None = None
    engine: str = "auto"  # the reading under test (auto: as declared)
    request_file: str | None = None  # request bodies as sent: penalties, grammar, adapters
    features: str | None = None  # the draft's own training features (a SpecForge .ckpt): train vs serve
    num_steps: int = 4
    live_samples: int = 2
    live_tokens: int = 64
    probe_budget: int = 20
    device: str | None = None
    dtype: str | None = None
    served: str | None = None  # the server's own numbers (a file or URL): what its accept length was
    served_numbers: ServedAcceptance | None = None  # `served` read (the service reads it once)


@dataclass
class Subject:
    """The loaded pair under diagnosis and the engine reading (`readings.EngineView`) it runs under."""

    target: object  # backend.engine.loading.Target
    draft: object  # backend.engine.draft_model.Eagle3Draft
    draft_dir: str
    view: object
    kept_probe: ProbeResult | None = None  # a wiring probe kept with the pair: its answer, when no samples


# Lint codes with a class of their own (the rest are serving-flags).
LINT_CLASSES = {
    "synthetic-acceptance": "synthetic-acceptance",
    "k-varies-with-load": "synthetic-acceptance",
    **{c: c for c in ("sampling-penalties", "structured-output", "lora", "prefix-cache", "disaggregation")},
}


def lint_as_findings(lint_findings: list[dict]) -> list[Finding]:
    """The serving-flag lint's findings in the diagnosis's classes and severities."""
    return [
        Finding(
            LINT_CLASSES.get(finding["code"], "serving-flags"),
            severity(finding["severity"]),
            finding["message"]
            if LINT_CLASSES.get(finding["code"]) == finding["code"]  # its class names it already
            else f"{finding['code']}: {finding['message']}",
            {"code": finding["code"], "engine": finding.get("engine")},
            finding.get("fix", ""),
        )
        for finding in lint_findings
    ]


def diagnose_loaded(
    subject: Subject,
    preflight_report: dict,
    samples: list,
    lint: Callable[[list[list[int]] | None], list[dict]] | None = None,
    options: DiagnoseOptions | None = None,
    progress: Progress = no_progress,
    penalties: dict | None = None,
    features=None,
) -> Diagnosis:
    """Every check on a loaded pair under its view (`options.engine`'s reading); `lint(trained)`: the
    serving-flag lint's findings given the wirings the probe found the draft trained on (None: the
    declared one stands), asked once the verdict's probe (or the kept one) has answered, so that no
    lint fix writes a wiring the probe rejects; `penalties`: the sampling penalties served
    (request-style names), measured on live replays; `features`: the draft's training features
    (backend.data.features.FeatureFile, read from `options.features`). Without samples, the subject's
    kept probe gives its answer."""
    options = options or DiagnoseOptions()
    target, draft, num_steps = subject.target, subject.draft, options.num_steps
    ran: dict = {}
    findings = preflight_findings(preflight_report, options.engine)
    ran["preflight"] = "ran"
    ran["serving flags"] = (
        "ran"
        if lint is not None
        else "skipped: no serving command (CLI --sglang, --vllm or --request; page: Serving command)"
    )

    def linted(answer: ProbeAnswer | None) -> list[Finding]:
        trained = answer.tied if answer is not None and not answer.confirmed else None
        return lint_as_findings(lint(trained)) if lint is not None else []

    findings += vocab_findings(draft, target.vocab_size, samples, num_steps)
    findings += context_findings(draft.config, target.model.config, options.context)
    findings += precision_findings(target, target.model.config)
    findings += head_findings(draft, target)
    ran["draft head"] = "ran"
    if features is not None:
        progress(0.03, "train vs serve")
        diff = train_vs_serve(target, features, list(subject.view.wiring.aux_hf_indices))
        findings += train_serve_findings(diff, str(options.features))
        ran["train vs serve"] = f"ran on {options.features}"
    else:
        ran["train vs serve"] = "skipped: no training features (CLI --features; page: Training features)"
    if not samples:
        checks = ("wiring probe", "reading probe", "chat template", "live replays", "penalties")
        for check in checks + (("server's numbers",) if options.served_numbers else ()):
            ran[check] = "skipped: no samples (CLI --samples; page: untick Cheap checks only)"
        kept = subject.kept_probe
        answer = ProbeAnswer.of_stored(kept) if kept else None
        if kept:  # one kept with the pair sees the wiring: its answer counts here too
            findings += stored_probe_findings(kept, target.num_layers)
            findings = engine_wiring_against_probe(findings, answer)
            ran["wiring probe"] = (
                f"ran earlier ({kept.ran_by or 'kept with the pair'}, "
                f"{kept.n_samples} samples): its answer is used"
            )
        return Diagnosis(findings + linted(answer), ran)
    measured: dict = {}
    findings += _sample_findings(subject, samples, options, ran, progress, penalties or {}, measured)
    probe = measured.pop("probe", None)
    live_wiring = measured.pop("live_wiring", None)
    if probe is not None and live_wiring is not None:  # the probe's table shows the verdict's live replays
        probe = replace(probe, candidates=[
            replace(c, live_accept_length=measured["live_accept_length"])
            if tuple(c.aux_hf_indices) == live_wiring and c.live_accept_length is None else c
            for c in probe.candidates
        ])  # fmt: skip
    answer = ProbeAnswer.of_stored(probe) if probe else None
    findings = (engine_wiring_against_probe(findings, answer) if answer else findings) + linted(answer)
    progress(1.0, "done")
    return Diagnosis(findings, ran, LiveMeasure(**measured) if measured else None, probe)


def served_against_replays(subject: Subject, options: DiagnoseOptions, prompts, wiring, live: float) -> list:
    """The server's accept length beside the replays' under the wiring the engine reads and (when the
    probe found another) under the found one, whose live replays ran already (`live`)."""
    from backend.diagnostics.served_verdict import served_findings
    from backend.engine.batch import accept_lengths
    from backend.run.metrics import acceptance_metrics

    declared = subject.view.wiring
    found = None
    if tuple(wiring.aux_hf_indices) != tuple(declared.aux_hf_indices):
        found = (list(wiring.aux_hf_indices), live)
        counts = accept_lengths(
            subject.target,
            subject.draft,
            [list(s.prompt_ids) for s in prompts],
            declared,
            options.num_steps,
            options.live_tokens,
            subject.view.math,
        )
        steps = [a for per in counts for a in per]
        live = acceptance_metrics(steps, options.num_steps).mean_accept_length if steps else 1.0
    return served_findings(
        options.served_numbers, options.num_steps, (list(declared.aux_hf_indices), live), found
    )


def _sample_findings(
    subject: Subject,
    samples: list,
    options: DiagnoseOptions,
    ran: dict,
    progress: Progress,
    penalties: dict,
    measured: dict,
) -> list[Finding]:
    """The checks that need samples, in order (each may use the wiring an earlier one found); what
    each ran on goes into `ran`."""
    target, draft, num_steps = subject.target, subject.draft, options.num_steps
    wiring, math = subject.view.wiring, subject.view.math
    findings: list[Finding] = []
    progress(0.05, "wiring probe")
    settings = ProbeSettings(num_steps, options.probe_budget)
    probe = run_probe(
        target,
        draft,
        wiring,
        samples,
        settings,
        math=math,
        progress=lambda f, m: progress(0.05 + 0.3 * f, f"wiring probe: {m}"),
        ran_by=f"Diagnose (read as {subject.view.engine})",
    )
    measured["probe"] = probe  # the engine findings are held against it (diagnose_loaded)
    ran["wiring probe"] = f"ran on {len(samples)} samples"
    findings += wiring_findings(probe, target.num_layers)
    if not probe.confirmed:
        wiring = Wiring(tuple(probe.tied[0]), "the wiring probe's best")
    assumes = (
        f"HF {list(wiring.aux_hf_indices)}, "
        + ("the wiring probe's best, not the declared one" if not probe.confirmed else "the declared wiring")
        + f", read as {subject.view.engine}"
    )
    progress(0.35, "reading probe")
    readings = run_reading_probe(
        target,
        subject.draft_dir,
        wiring,
        samples,
        options.engine,
        num_steps,
        lambda f, m: progress(0.35 + 0.3 * f, m),
    )
    ran["reading probe"] = f"ran on {readings.n_samples} samples, {len(readings.candidates)} readings"
    findings += reading_findings(readings)
    progress(0.65, "chat template")
    findings += template_findings(target, draft, wiring, math, samples, num_steps, assumes)
    ran["chat template"] = (
        "ran"
        if target.tokenizer is not None and getattr(target.tokenizer, "chat_template", None)
        else "skipped: the target has no chat template"
    )
    progress(0.75, "live replays")
    live_samples = samples[: options.live_samples]
    predicted = predicted_accept_length(target, draft, wiring, math, live_samples, num_steps)
    live, evidence = live_findings(
        target, draft, wiring, math, live_samples, (num_steps, options.live_tokens), predicted, assumes
    )
    findings += live
    if evidence["live_accept_length"] is not None:
        measured.update(
            {
                "live_accept_length": evidence["live_accept_length"],
                "predicted_accept_length": evidence["predicted_accept_length"],
                "samples": len(live_samples),
                "verify_steps": evidence["verify_steps"],
                "max_new_tokens": options.live_tokens,
                "assumes": assumes,
                "definition": evidence["definition"],
                "live_wiring": tuple(wiring.aux_hf_indices),
            }
        )
    ran["live replays"] = f"ran on {len(live_samples)} samples"
    if options.served_numbers is not None and evidence["live_accept_length"] is not None:
        progress(0.8, "the server's numbers")
        findings += served_against_replays(
            subject, options, live_samples, wiring, evidence["live_accept_length"]
        )
        ran["server's numbers"] = f"compared with {options.served_numbers.source}"
    if penalties:
        progress(0.85, "penalties")
    found, ran["penalties"] = penalty_findings(
        target, draft, wiring, math, live_samples, num_steps, options.live_tokens, penalties
    )
    findings += found
    if options.context:
        progress(0.9, "context curve")
        found, curve = context_curve(target, draft, wiring, math, samples, options.context, num_steps)
        findings += found
        ran["context curve"] = f"ran at {[p['prompt_tokens'] for p in curve]} tokens"
    else:
        ran["context curve"] = "skipped: no served context (CLI --context; page: Served context)"
    return findings
