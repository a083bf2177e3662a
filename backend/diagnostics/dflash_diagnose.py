"""`diagnose` on a DFlash draft: preflight's DFlash findings (the block, the layers, the mask id, RoPE),
the serving command's lint, the layer probe on the samples (which target layers it was trained on)
and live replays of the first samples, in diagnose's classes (backend/diagnostics/diagnose.py)."""

from __future__ import annotations

from backend.diagnostics.dflash_probe import probe_layers
from backend.diagnostics.diagnose import Diagnosis, lint_as_findings
from backend.diagnostics.findings import Finding
from backend.run.records import Progress, no_progress

# preflight's DFlash check names -> diagnose's classes
CHECK_CLASSES = {
    "target layers": "aux-wiring",
    "mask token": "variant-flags",
    "rope_theta": "rope / context-window",
    "block length": "serving-flags",
    "hidden size": "variant-flags",
    "engines": "serving-flags",
}
LIVE_SAMPLES = 2


def diagnose_dflash(
    target,
    draft,
    report: dict,
    samples: list,
    lint_findings: list[dict],
    options,
    progress: Progress = no_progress,
    fed: list[int] | None = None,
) -> Diagnosis:
    """`options` (diagnose.DiagnoseOptions): K, and the draft's training features (`features`, a .ckpt
    with one chunk per target layer it reads) diffed against what the diagnosed engine feeds it
    (`fed`, HF indices; default dflash_config.target_layer_ids + 1) as for an EAGLE-3 draft."""
    num_steps = options.num_steps
    findings = [
        Finding(
            CHECK_CLASSES.get(c["name"], "variant-flags"),
            c["status"],
            f"preflight {c['name']}: {c['message']}",
            {"check": c},
        )
        for c in report.get("checks", [])
        if c["status"] != "pass"
    ]
    findings += lint_as_findings(lint_findings)
    ran = {"preflight": "ran", "serving-flag lint": "ran" if lint_findings else "skipped: no serving command"}
    if options.features:
        from backend.data.features import load_feature_file
        from backend.diagnostics.hidden_diff import train_vs_serve
        from backend.diagnostics.train_serve import train_serve_findings
        from backend.engine.dflash_step import dflash_wiring

        progress(0.05, "train vs serve")
        fed = fed or list(dflash_wiring(draft.config).aux_hf_indices)
        features = load_feature_file(options.features, target.hidden_size)
        findings += train_serve_findings(
            train_vs_serve(target, features, fed, True), features.path, dflash=True
        )
        ran["train vs serve"] = f"ran on {features.path}"
    else:
        ran["train vs serve"] = "skipped: no training features (CLI --features; page: Training features)"
    if not samples:
        ran["wiring probe"] = "skipped: no samples"
        return Diagnosis(findings, ran)
    progress(0.1, "layer probe")
    probed = probe_layers(
        target, draft, samples, progress=lambda f, m: progress(0.1 + 0.6 * f, f"layer probe: {m}")
    )
    ran["wiring probe"] = f"ran: the DFlash layer probe on {probed.n_samples} samples"
    severity = "info" if probed.confirmed else "fail"
    findings.append(
        Finding(
            "aux-wiring",
            severity,
            probed.verdict,
            {"candidates": [c.to_dict() for c in probed.candidates]},
            "" if probed.fix is None else f"Write {probed.fix} in the draft's config.json.",
        )
    )
    progress(0.75, "live replays")
    from backend.engine.batch import accept_lengths
    from backend.engine.dflash_step import dflash_wiring

    live = [list(s.prompt_ids) for s in samples[:LIVE_SAMPLES]]
    counts = [
        a
        for per in accept_lengths(target, draft, live, dflash_wiring(draft.config), num_steps, 64)
        for a in per
    ]
    measured = 1 + sum(counts) / len(counts) if counts else None
    ran["live replays"] = (
        f"ran: {len(live)} samples x 64 tokens, K = {num_steps}, accept length {measured:.2f}"
        if measured
        else "ran: no verify step"
    )
    if options.served_numbers is not None and measured is not None:  # no other wiring to hold it against
        from backend.diagnostics.served_verdict import served_findings
        from backend.engine.dflash_step import dflash_wiring

        declared = list(dflash_wiring(draft.config).aux_hf_indices)
        findings += served_findings(options.served_numbers, num_steps, (declared, measured), None)
        ran["server's numbers"] = f"compared with {options.served_numbers.source}"
    if measured is not None and measured < 1.05:
        findings.append(
            Finding(
                "no-acceptance",
                "fail",
                f"the live replays accept almost nothing (accept length {measured:.2f}, K = {num_steps})",
                {},
                "",
            )
        )
    progress(1.0, "done")
    return Diagnosis(findings, ran)
