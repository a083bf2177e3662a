"""One verdict from every signal the diagnostics have, cheapest first, with the next check to run.

Signals (each a dict as its own check returns it; any may be missing):
- preflight: backend.engine.preflight's report (does the checkpoint load, which wiring is declared);
- lint: serving-flag lint findings for the draft's own config under each engine (no model loaded);
- diff: the train-vs-serve hidden-state diff (backend.diagnostics.hidden_diff), when training
  features exist: whether the features serving feeds equal those training stored, per chunk;
- probe: the wiring probe's report (backend.diagnostics.probe), the only check that can tell which
  layers a draft was trained on without its training features, and the most expensive one.

Preflight and the lint take the declared wiring as the trained one, so they can pass a mis-wired
draft: the verdict never calls a draft healthy on their word alone; it says "unverified" and points
at the check that can see the wiring.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from backend.diagnostics.findings import severity

LEVELS = ("ok", "unverified", "warning", "error")  # worst last
ACTIONS = ("fix the checkpoint",)  # next steps that are not a check to run


@dataclass
class Verdict:
    level: str
    headline: str
    reasons: list[str] = field(default_factory=list)
    next_check: str | None = None
    next_why: str | None = None
    signals: dict = field(default_factory=dict)  # signal -> "passed" | "failed" | "not run" | ...

    @property
    def next_step(self) -> str | None:
        """What to do next, as a sentence: run a check, or the action itself ("fix the checkpoint")."""
        if self.next_check is None:
            return None
        return self.next_check if self.next_check in ACTIONS else f"run the {self.next_check}"

    def to_dict(self) -> dict:
        return {**asdict(self), "next_step": self.next_step}


def _worse(a: str, b: str) -> str:
    return max(a, b, key=LEVELS.index)


def _lint_signal(findings: list[dict] | None) -> str:
    """The lint's state in the signals line: its errors and warnings counted, "passed" only with none."""
    if findings is None:
        return "not run"
    counts = {
        word: sum(severity(f.get("severity", "info")) == level for f in findings)
        for level, word in (("fail", "error"), ("warn", "warning"))
    }
    found = [f"{n} {word}{'s' if n > 1 else ''}" for word, n in counts.items() if n]
    return ", ".join(found) if found else "passed"


@dataclass
class _Tally:
    """What the signals have said so far: the worst level, the reasons, each signal's state, and the
    HF indices some check found the draft trained on (with the wirings the probe could not tell from
    them, backend/diagnostics/probe.py)."""

    level: str = "ok"
    reasons: list = field(default_factory=list)
    signals: dict = field(default_factory=dict)
    trained: list | None = None
    as_good: list = field(default_factory=list)

    def worsen(self, level: str, reason: str) -> None:
        self.level = _worse(self.level, level)
        self.reasons.append(reason)


def summarise(
    preflight: dict | None,
    lint_findings: list[dict] | None = None,
    diff: dict | None = None,
    diff_note: str | None = None,
    probe: dict | None = None,
) -> Verdict:
    tally = _Tally()
    refused = _add_preflight(tally, preflight)
    if refused is not None:
        return refused
    _add_lint(tally, lint_findings)
    _add_probe(tally, probe)
    _add_diff(tally, diff, diff_note)
    return _conclude(tally, preflight, diff, probe)


def _add_preflight(tally: _Tally, preflight: dict | None) -> Verdict | None:
    """The preflight's signal; the verdict itself when the draft does not load."""
    if preflight is None:
        tally.signals["preflight"] = "not run"
        return None
    if preflight.get("ok"):
        tally.signals["preflight"] = "passed"
        tally.reasons.append(f"preflight passed; declared wiring HF {preflight.get('aux_hf_indices')}")
        return None
    failed = [c for c in preflight.get("checks", []) if c.get("status") == "fail"]
    first = failed[0] if failed else {}
    tally.signals["preflight"] = "failed"
    return Verdict(
        "error",
        "The checkpoint does not load as served: "
        + (f"{first.get('name', 'a check')}: {first.get('message', '')}" if first else "preflight failed"),
        [f"preflight: {c.get('name')}: {c.get('message', '')}" for c in failed],
        "fix the checkpoint",
        "no other check means anything until the draft loads against this target",
        tally.signals,
    )


def _add_lint(tally: _Tally, lint_findings: list[dict] | None) -> None:
    for finding in lint_findings or []:
        level = {"fail": "error", "warn": "warning"}.get(severity(finding.get("severity", "info")))
        if level is not None:
            tally.worsen(
                level, f"lint ({finding.get('engine', '')}): {finding.get('code')}: {finding.get('message')}"
            )
    # the lint of the draft's own config under each engine, not of a command (the lint tab checks one)
    tally.signals["config lint"] = _lint_signal(lint_findings)


def _add_probe(tally: _Tally, probe: dict | None) -> None:
    if probe is None:
        tally.signals["wiring probe"] = "not run"
        return
    best = probe.get("best", {}).get("aux_hf_indices")
    if probe.get("confirmed"):
        tally.signals["wiring probe"] = "confirmed"
        tally.reasons.append(f"wiring probe: the declared wiring is the trained one (HF {best})")
    else:
        tally.signals["wiring probe"] = "rejected the declared wiring"
        tally.trained, tally.as_good = best, list(probe.get("as_good_as_best") or [])
        tally.worsen("error", f"wiring probe: {probe.get('verdict', '')}")


def _add_diff(tally: _Tally, diff: dict | None, diff_note: str | None) -> None:
    if diff is None:
        tally.signals["train vs serve"] = diff_note or "not run"
        return
    mismatch = diff.get("first_mismatch")
    if not mismatch:
        tally.signals["train vs serve"] = "equal"
        tally.reasons.append("train vs serve: the features serving feeds equal training's")
        return
    found = diff.get("training_aux_hf_indices") or []
    tally.signals["train vs serve"] = "mismatch"
    tally.worsen(
        "error",
        f"train vs serve: the features serving feeds (HF {diff.get('serving_aux_hf_indices')}) differ "
        f"from training's from {mismatch.get('chunk')} at position {mismatch.get('position')}; the "
        f"training chunks equal HF {found} (None: no layer matches)",
    )
    # the diff compares the features themselves: where it names one of the wirings the probe
    # could not tell apart, it settles which
    exact = bool(found) and all(i is not None for i in found)
    if exact and (tally.trained is None or list(found) in [list(tally.trained), *map(list, tally.as_good)]):
        tally.trained, tally.as_good = found, []


def _conclude(tally: _Tally, preflight: dict | None, diff: dict | None, probe: dict | None) -> Verdict:
    """The verdict, first matching: mis-wired, features that match no layer, a breaking serving
    configuration, nothing that can see the wiring ran, serving-flag warnings, ok."""
    reasons, signals = tally.reasons, tally.signals
    if tally.trained is not None:
        as_good = tally.as_good
        return Verdict(
            "error",
            f"Mis-wired: this draft was trained on HF {tally.trained}"
            + (
                f" (or HF {', HF '.join(map(str, as_good[:3]))}, as good on the probe's samples)"
                if as_good
                else ""
            )
            + ", but it is declared (and served) with HF "
            f"{preflight.get('aux_hf_indices') if preflight else '?'}.",
            reasons,
            None if probe is not None else "wiring probe",
            None
            if probe is not None
            else "to confirm the trained layers by acceptance (the diff compared one training file)",
            signals,
        )
    if diff is not None and diff.get("first_mismatch"):
        return Verdict(
            "error",
            "The features serving feeds are not the ones the draft was trained on.",
            reasons,
            "wiring probe",
            "the training chunks match no single target layer here, so only acceptance under candidate "
            "wirings can tell which layers the draft needs",
            signals,
        )
    if tally.level == "error":
        unseen = probe is None and diff is None
        return Verdict(
            "error",
            "The serving configuration breaks this draft (see the lint).",
            reasons,
            "wiring probe" if unseen else None,
            "the lint's fixes assume the declared wiring is the trained one; only the probe (or the "
            "training features) can tell"
            if unseen
            else None,
            signals,
        )
    if probe is None and diff is None:
        return Verdict(
            "unverified" if tally.level == "ok" else tally.level,
            "Nothing cheap found a fault, but nothing cheap can see the wiring: preflight and the lint take the "
            "declared layers as the trained ones, and no training features were compared.",
            reasons,
            "wiring probe",
            "a draft declared with the wrong layers passes every check above; the probe measures acceptance "
            "under candidate wirings (minutes on a large target)",
            signals,
        )
    if tally.level == "warning":
        return Verdict(
            "warning",
            "Healthy wiring, with serving-flag warnings (see the lint).",
            reasons,
            None,
            None,
            signals,
        )
    return Verdict(
        "ok", "The draft is served with the layers it was trained on.", reasons, None, None, signals
    )
