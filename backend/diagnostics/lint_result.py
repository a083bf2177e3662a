"""The serving-flag lint's answer as values: its findings in the lint's words, what the engine will
really run, and the command with every fix applied; one type for SGLang, vLLM and llama.cpp."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from backend.data.serving_command import ServingSettings
from backend.diagnostics.findings import SEVERITIES, Finding, spelled
from backend.plain import Plain
from backend.run.shapes import sglang_flags


@dataclass
class LintReport:
    findings: list[Finding]
    requested: ServingSettings
    effective: dict = field(default_factory=dict)
    # What the findings change on the command line (backend/data/serving_rewrite.py), and the codes
    # of the findings behind those changes; `recommended` is the command with all of them applied.
    edits: dict = field(default_factory=dict)
    edited: tuple[str, ...] = ()
    recommended: str | None = None

    def result(self) -> LintResult:
        """The lint as the CLI prints it and the page draws it."""
        return lint_result(
            self.findings,
            self.requested.engine,
            asdict(self.requested),
            self.effective,
            effective_flags(self.requested.engine, self.effective),
            self.recommended,
            self.edited,
        )


@dataclass(frozen=True)
class LintFinding(Plain):
    """A finding as the lint's JSON writes it: the severity in the lint's words (error | warning |
    info), the finding's class as its code."""

    severity: str
    code: str
    message: str
    fix: str = ""


@dataclass(frozen=True)
class LintResult(Plain):
    """The lint's JSON (CLI contract): the findings worst first, what was asked and what will run, and
    the command with every fix applied (`recommended_applies`: the codes it fixes; `recommended_leaves`:
    those it cannot, outside the command)."""

    findings: list[LintFinding]
    engine: str
    requested: dict
    effective: dict
    effective_flags: str | None
    errors: int
    recommended_command: str | None = None
    recommended_applies: list[str] = field(default_factory=list)
    recommended_leaves: list[str] = field(default_factory=list)


def lint_result(
    findings: list[Finding],
    engine: str,
    requested: dict,
    effective: dict,
    flags: str | None,
    recommended: str | None = None,
    edited: tuple[str, ...] = (),
) -> LintResult:
    """The lint of any engine's command (lint_llamacpp.py writes llama-server's through it too)."""
    findings = sorted(findings, key=lambda f: SEVERITIES.index(f.severity))
    return LintResult(
        findings=[LintFinding(spelled(f.severity, "lint"), f.cls, f.message, f.fix) for f in findings],
        engine=engine,
        requested=requested,
        effective=effective,
        effective_flags=flags,
        errors=sum(f.severity == "fail" for f in findings),
        recommended_command=recommended,
        recommended_applies=list(edited),
        recommended_leaves=[f.cls for f in findings if f.severity != "info" and f.cls not in edited],
    )


def effective_flags(engine: str, effective: dict) -> str | None:
    """What will run, written as the engine's command line writes it."""
    if engine == "sglang":
        shape = [effective.get(k) for k in ("num_steps", "topk", "num_draft_tokens")]
        return None if None in shape else sglang_flags(*shape)
    k = effective.get("num_speculative_tokens")
    return None if k is None else f"--speculative-config '{{\"num_speculative_tokens\": {k}, ...}}'"
