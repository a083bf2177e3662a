"""One finding of a diagnosis: its class (diagnose.CLASSES, part of the CLI contract), a severity
(fail | warn | info), the message, the evidence behind it and the fix."""

from __future__ import annotations

from dataclasses import dataclass, field

SEVERITIES = ("fail", "warn", "info")


@dataclass
class Finding:
    cls: str
    severity: str
    message: str
    evidence: dict = field(default_factory=dict)
    fix: str = ""

    def to_dict(self) -> dict:
        return {
            "class": self.cls,
            "severity": self.severity,
            "message": self.message,
            "evidence": self.evidence,
            "fix": self.fix,
        }
