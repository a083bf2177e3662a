"""The probes' answers as diagnose's findings: the wiring probe's (run now, or kept with the pair), the
serving engines' wiring findings held against it (no fix may write a wiring the probe rejects), and the
reading probe's."""

from __future__ import annotations

from dataclasses import dataclass, replace

from backend.diagnostics.findings import Finding
from backend.diagnostics.probe_report import describe
from backend.diagnostics.probe_settings import ProbeResult
from backend.drafts.reading_fixes import wiring_fix


def wiring_findings(report: ProbeResult, num_layers: int) -> list[Finding]:
    """The probe's verdict as a finding: every tied wiring named (`ProbeResult.tied`, the one set every
    view uses); the fix writes a wiring only when the probe separated it, else says how to separate."""
    if report.confirmed:
        return []
    best, tied = report.best, report.tied
    names = " or ".join(f"HF {list(t)}" for t in tied)
    message = (
        f"the draft was trained on {names}, not on the declared {describe(report.declared.aux_hf_indices, num_layers)}: "
        + (
            f"training loss {best.loss:.3f} vs {report.declared.loss:.3f} nats, "
            if best.loss is not None and report.declared.loss is not None
            else ""
        )
        + f"acc_0 {best.acc_step0:.3f} vs {report.declared.acc_step0:.3f}"
    )
    if len(tied) > 1:
        message += f" ({report.n_samples} samples cannot tell these {len(tied)} apart)"
    fix = (
        f"Declare the trained wiring: eagle_config.eagle_aux_hidden_state_layer_ids = "
        f"{[i - 1 for i in best.aux_hf_indices]} (SGLang/SpecForge) and top-level "
        f"eagle_aux_hidden_state_layer_ids = {list(best.aux_hf_indices)} (vLLM)."
        if report.separated
        else report.how_to_separate
    )
    return [
        Finding(
            "aux-wiring",
            "fail",
            message,
            {
                "declared": list(report.declared.aux_hf_indices),
                "best": list(best.aux_hf_indices),
                "tied": [list(t) for t in tied],
                "as_good_as_best": [list(t) for t in tied[1:]],
                "separated": report.separated,
                "acc_step0": {"declared": report.declared.acc_step0, "best": best.acc_step0},
                "training_loss": {"declared": report.declared.loss, "best": best.loss},
                "n_positions": best.n_positions,
            },
            fix,
        )
    ]


@dataclass(frozen=True)
class ProbeAnswer:
    """What a wiring probe concluded, from one that ran in this verdict or one kept with the pair (the
    probe tab's, the CLI's, an earlier Diagnose's; an older version's with defaults)."""

    confirmed: bool
    separated: bool
    best: list[int]
    tied: list[list[int]]
    declared: list[int]
    how_to_separate: str
    n_samples: int

    @classmethod
    def of_stored(cls, stored: ProbeResult) -> ProbeAnswer:
        best = list(stored.best.aux_hf_indices) if stored.best else []
        return cls(
            stored.confirmed,
            stored.separated,
            best,
            [list(t) for t in stored.tied or [best]],
            list(stored.declared.aux_hf_indices) if stored.declared else [],
            stored.how_to_separate or "",
            stored.n_samples or 0,
        )


def stored_probe_findings(stored: ProbeResult, num_layers: int) -> list[Finding]:
    """A wiring probe kept with the pair, as the verdict's finding when this verdict ran none (the
    cheap checks, which would otherwise say 'No cause found' while the stored probe rejects the
    declared wiring)."""
    answer = ProbeAnswer.of_stored(stored)
    if answer.confirmed or not answer.best:
        return []
    names = " or ".join(f"HF {t}" for t in answer.tied)
    fix = (
        f"Declare the trained wiring: eagle_config.eagle_aux_hidden_state_layer_ids = "
        f"{[i - 1 for i in answer.best]} (SGLang/SpecForge) and top-level eagle_aux_hidden_state_layer_ids = "
        f"{answer.best} (vLLM)."
        if answer.separated
        else answer.how_to_separate
    )
    return [
        Finding(
            "aux-wiring",
            "fail",
            f"the draft was trained on {names}, not on the declared {describe(answer.declared, num_layers)} "
            f"(the wiring probe {stored.ran_by or 'an earlier run'} ran on {answer.n_samples} samples, "
            "kept with this pair)",
            {
                "declared": answer.declared,
                "best": answer.best,
                "tied": answer.tied,
                "separated": answer.separated,
            },
            fix,
        )
    ]


def engine_wiring_against_probe(findings: list[Finding], answer: ProbeAnswer) -> list[Finding]:
    """The serving engines' wiring findings (cheap_checks.preflight_findings: what each engine feeds
    against the wiring the config declares) held against the wiring probe's answer (`ProbeAnswer`).
    When the probe rejects the declared wiring, no finding may write it into a fix: with one separated
    wiring, each engine finding states what it feeds against that one (and goes when the engine feeds
    it); with a tie, it says the trained wiring is unknown and how to separate."""
    if answer.confirmed:
        return findings
    best, tied = answer.best, answer.tied
    out = []
    for finding in findings:
        evidence = finding.evidence
        if finding.cls != "aux-wiring" or not {"engine", "fed", "trained"} <= set(evidence):
            out.append(finding)
            continue
        engine, fed, declared = evidence["engine"], evidence["fed"], evidence["trained"]
        if answer.separated and fed == best:
            continue  # this engine feeds what the probe found the draft trained on
        said = f"served by {engine}: it feeds HF {fed}; the wiring probe rejects the declared HF {declared}"
        if answer.separated:
            words, _ = wiring_fix(engine, best)
            out.append(
                replace(
                    finding,
                    message=f"{said} and found the draft trained on HF {best}",
                    evidence={**evidence, "trained": best, "declared": declared},
                    fix=f"In the draft's config.json: {words}",
                )
            )
        else:
            out.append(
                replace(
                    finding,
                    message=f"{said}; which wiring it was trained on is not known yet ({len(tied)} tie: "
                    + " / ".join(f"HF {t}" for t in tied)
                    + ")",
                    evidence={**evidence, "trained": None, "declared": declared, "tied": tied},
                    fix=answer.how_to_separate,
                )
            )
    return out


DIMENSION_CLASS = {
    "rope": "rope / context-window",
    "offset": "position-offset",
    "flag": "variant-flags",
    "feedback": "variant-flags",
}


def reading_findings(report) -> list[Finding]:
    better = report.better()
    if not better:
        return []
    found = []
    for dimension in ("rope", "offset", "flag", "feedback"):
        here = [c for c in better if c.dimension == dimension]
        if not here:
            continue
        best = here[0]
        tied = [c for c in report.ties(best) if c.dimension == dimension]
        names = " or ".join(c.label for c in [best, *tied][:3])
        found.append(
            Finding(
                DIMENSION_CLASS[dimension],
                "fail",
                f"the draft reads better with {names} than as declared: teacher-forced accuracy "
                f"{best.accuracy:.3f} vs {report.declared.accuracy:.3f} (separation needed {report.margin(best):.3f}: three paired standard errors)",
                {
                    "candidates": [c.to_dict() for c in [best, *tied]],
                    "declared": report.declared.to_dict(),
                    "engine": report.engine,
                },
                _candidate_fix(best, tied),
            )
        )
    return found


def _candidate_fix(best, tied) -> str:
    def one(candidate) -> str:
        if candidate.patch:
            return (
                "set "
                + ", ".join(f"{k}: {v}" for k, v in candidate.patch.items())
                + " in the draft's config.json"
            )
        if candidate.dimension == "offset":
            return (
                f"the draft was trained with its drafted positions {candidate.offset:+d} against the context: "
                "serve it with an engine (release) whose draft positions match training, or retrain"
            )
        return (
            "serve with the other feedback: set norm_output to the opposite value for this engine's reading"
        )

    text = one(best)
    if tied:
        text += "; or " + "; or ".join(one(c) for c in tied[:2]) + " (the samples cannot tell them apart)"
    return text[0].upper() + text[1:] + "."
