"""A preflight's answer as a value: the checks, the wiring, each engine's view; the refusal of a
draft that failed (backend/engine/preflight.py and dflash_preflight.py make them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from backend import BadInput
from backend.drafts.engine_table import Check, Disagreement, PreflightResult
from backend.run.wiring import Wiring


@dataclass
class PreflightReport:
    checks: list[Check]
    wiring: Wiring | None  # the override, else the training reading's wiring
    engines: dict = field(default_factory=dict)  # engine name -> EngineView (backend/drafts/readings.py)
    training_engine: str | None = None
    disagreements: list = field(default_factory=list)
    serving_fixes: list = field(default_factory=list)  # reading_fixes.serving_wiring_findings

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def warnings(self) -> list[Check]:
        return [c for c in self.checks if c.status == "warn"]

    def result(self) -> PreflightResult:
        """The report as `preflight --json` writes it and the pages read it."""
        return PreflightResult(
            ok=self.ok,
            checks=list(self.checks),
            aux_hf_indices=list(self.wiring.aux_hf_indices) if self.wiring else [],
            wiring_source=self.wiring.source if self.wiring else None,
            training_engine=self.training_engine,
            engines={name: view.reading() for name, view in self.engines.items()},
            disagreements=[Disagreement.from_dict(d) for d in self.disagreements],
            serving_fixes=self.serving_fixes,
        )


class PreflightRefused(BadInput):
    """A draft that failed preflight; carries the whole report for the dashboard's table."""

    def __init__(self, draft_dir, report: PreflightReport):
        failure = report.failures()[0]
        super().__init__(f"draft {draft_dir} failed preflight: {failure.name}: {failure.message}")
        self.report = report
