"""One finding, of a diagnosis or of the serving-flag lint: its class (diagnose.CLASSES, or the lint's
code; both part of the CLI contract), a severity, the message, the evidence behind it and the fix.

One severity scale, worst first: fail (acceptance is lost or the draft is misused), warn (a likely
loss), info (worth knowing). The CLI contract spells it per command, and those words never change:
diagnose writes fail | warn | info, the lint error | warning | info (`spelled(..., "lint")`);
`severity` reads any of the spellings back onto the scale."""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass
class Finding:
    cls: str
    severity: str
    message: str
    evidence: dict = field(default_factory=dict)
    fix: str = ""

    @property
    def code(self) -> str:  # the lint's name for the class
        return self.cls

    def to_dict(self) -> dict:
        return {
            "class": self.cls,
            "severity": self.severity,
            "message": self.message,
            "evidence": self.evidence,
            "fix": self.fix,
        }
