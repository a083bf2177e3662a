"""One finding, of a diagnosis or of the serving-flag lint: its class (diagnose.CLASSES, or the lint's
code; both part of the CLI contract), a severity, the message, the evidence behind it and the fix.

One severity scale, worst first: fail (acceptance is lost or the draft is misused), warn (a likely
loss), info (worth knowing). The CLI contract spells it per command, and those words never change:
diagnose writes fail | warn | info, the lint error | warning | info (`spelled(..., "lint")`);
`severity` reads any of the spellings back onto the scale.

`DiagnosisResult` is diagnose's JSON as a value (the CLI's `diagnose --json`, the page's verdict): the
findings with the verdict over them. Torch-free: the pages read it."""

from __future__ import annotations

from dataclasses import dataclass, field

from backend.diagnostics.probe_settings import ProbeResult
from backend.plain import KEY, Plain

SEVERITIES = ("fail", "warn", "info")
SPELLINGS = {  # contract -> its word for each severity, in SEVERITIES' order
    "diagnose": ("fail", "warn", "info"),
    "lint": ("error", "warning", "info"),
}


def severity(word: str) -> str:
    """The severity a word of any contract means (fail/error, warn/warning, info)."""
    for words in SPELLINGS.values():
        if word in words:
            return SEVERITIES[words.index(word)]
    raise ValueError(f"not a severity: {word!r}")


def spelled(level: str, contract: str) -> str:
    """How `contract`'s JSON writes the severity `level`."""
    return SPELLINGS[contract][SEVERITIES.index(level)]


@dataclass(frozen=True)
class Finding(Plain):
    cls: str = field(metadata={KEY: "class"})
    severity: str
    message: str
    evidence: dict = field(default_factory=dict)
    fix: str = ""

    @property
    def code(self) -> str:  # the lint's name for the class
        return self.cls


@dataclass(frozen=True)
class LiveMeasure(Plain):
    """The live replays' accept length beside the teacher-forced prediction, with what they assumed
    (the wiring and reading they ran)."""

    live_accept_length: float
    predicted_accept_length: float | None
    samples: int
    verify_steps: int
    max_new_tokens: int
    assumes: str
    definition: str


@dataclass(frozen=True)
class DiagnosisResult(Plain):
    """The verdict over the findings (worst first), what each check did, and the pair and reading it
    ran on. A verdict from before a field existed reads with its default."""

    verdict: str
    headline: str
    findings: list[Finding]
    checks: dict[str, str]  # check -> what it did ("ran", "skipped: why")
    measured: LiveMeasure | None = None
    probe: ProbeResult | None = None  # the wiring probe this verdict ran (the probe tab reuses it)
    wiring_seen: bool = True
    next_step: str | None = None
    classes: list[str] = field(default_factory=list)
    target: str = ""
    draft: str = ""
    engine: str = ""
    aux_hf_indices: list[int] = field(default_factory=list)
    wiring_source: str | None = None  # None when preflight failed
    n_samples: int = 0
