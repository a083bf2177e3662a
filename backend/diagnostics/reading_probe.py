"""Reading probe: which reading of this checkpoint was the draft trained with? (docs/reference.md §13)

The wiring probe (backend/diagnostics/probe.py) asks which target states feed the draft. A draft is
also read through its RoPE (theta, scaling), its positions (an engine that feeds them one off), its
variant flags (fc_norm, norm_before_fc, norm_before_residual, norm_output) and the hidden it feeds
back to its next step (pre- or post-norm). Each candidate reading changes one of these against the
reading under test and is scored by teacher-forced accuracy pooled over the TTT steps (a feedback or
offset change can leave step 0 untouched), with a binomial standard error. Samples are taken in
chunks until the best candidate is separated from the reading under test by two standard errors,
or the samples end. A candidate that cannot be told from the reading under test is never reported
as the trained one.

Config candidates are built from the checkpoint's own config.json with one key changed
(`parse_draft_config`, the one place that knows each transformers version's RoPE fields), so the
fix a finding gives is that key, as the file should say it.
"""

from __future__ import annotations

import math as maths
from dataclasses import dataclass, field, replace
from pathlib import Path

from backend import BadInput
from backend.drafts.draft_config import parse_draft_config, read_config_file
from backend.drafts.engine_readers import DraftMath
from backend.drafts.readings import read_as
from backend.engine.loading import Target, read_draft
from backend.engine.preflight import build_draft, check_draft
from backend.engine.teacher import TargetPass, TeacherCounts, draft_hits, draft_vocab_mask, target_pass
from backend.plain import KEY, OMIT, Plain
from backend.run.records import Progress, no_progress
from backend.run.wiring import Wiring

CHUNK = 4  # samples added per round while the best candidate is not separated
# Paired standard errors a candidate must beat the declared reading by: about ten candidates are tried
# at once, so two would name a spurious reading in about one diagnosis of six; three in one of a hundred.
SEPARATION = 3.0
COMMON_THETAS = (10_000.0, 500_000.0, 1_000_000.0)  # Llama 2, Llama 3, Qwen
FLAGS = ("fc_norm", "norm_before_fc", "norm_before_residual", "norm_output")


@dataclass
class ReadingCandidate(Plain):
    DERIVED = ("accuracy", "standard_error")

    label: str
    dimension: str  # declared | rope | offset | flag | feedback
    patch: dict = field(default_factory=dict)  # config keys as the file should say them
    math_change: dict = field(default_factory=dict)  # DraftMath fields changed without a config key
    offset: int = field(default=0, metadata={KEY: "position_offset"})
    correct: int = 0
    counted: int = field(default=0, metadata={KEY: "n_positions"})
    acc_per_step: list = field(default_factory=list)
    # working state, not written: the patched draft, its math, its counts, and per (sample, step) the
    # correct mask over counted positions
    draft: object = field(default=None, repr=False, metadata={OMIT: True})
    math: DraftMath | None = field(default=None, repr=False, metadata={OMIT: True})
    steps: TeacherCounts | None = field(default=None, repr=False, metadata={OMIT: True})
    hits: list = field(default_factory=list, repr=False, metadata={OMIT: True})

    @property
    def accuracy(self) -> float:
        return self.correct / self.counted if self.counted else 0.0

    @property
    def standard_error(self) -> float:
        p, n = self.accuracy, self.counted
        return maths.sqrt(p * (1 - p) / n) if n else 1.0


@dataclass
class ReadingReport(Plain):
    DERIVED = ("better_than_declared",)

    declared: ReadingCandidate
    candidates: list[ReadingCandidate]  # best first
    n_samples: int
    engine: str

    def margin(self, candidate: ReadingCandidate) -> float:
        """SEPARATION standard errors of the accuracy difference between `candidate` and the declared reading."""
        return SEPARATION * paired_error(candidate, self.declared)

    def better(self) -> list[ReadingCandidate]:
        """Candidates that beat the declared reading beyond the noise, best first."""
        return [
            c
            for c in self.candidates
            if c is not self.declared and c.accuracy - self.declared.accuracy > self.margin(c)
        ]

    def ties(self, best: ReadingCandidate) -> list[ReadingCandidate]:
        """Other candidates of better() within two standard errors of `best`."""
        return [
            c
            for c in self.better()
            if c is not best and best.accuracy - c.accuracy <= SEPARATION * paired_error(best, c)
        ]

    @property
    def better_than_declared(self) -> list[str]:
        return [c.label for c in self.better()]


def paired_error(a: ReadingCandidate, b: ReadingCandidate) -> float:
    """Standard error of acc(a) - acc(b) on the same positions (McNemar): only the positions where the
    two readings disagree carry information, so a small, consistent gain is seen where two independent
    binomial errors would hide it."""
    n = a.counted
    if not n or n != b.counted or len(a.hits) != len(b.hits):
        return maths.hypot(a.standard_error, b.standard_error)
    only_a = sum(int((x & ~y).sum()) for x, y in zip(a.hits, b.hits, strict=True))
    only_b = sum(int((y & ~x).sum()) for x, y in zip(a.hits, b.hits, strict=True))
    variance = max(only_a + only_b - (only_a - only_b) ** 2 / n, 1.0)  # at least one discordant position
    return maths.sqrt(variance) / n


def rope_theta(config) -> float | None:
    params = getattr(config, "rope_parameters", None) or {}
    theta = params.get("rope_theta", getattr(config, "rope_theta", None))
    return float(theta) if theta is not None else None


def rope_scaling(config) -> dict | None:
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    kind = params.get("rope_type", params.get("type", "default"))
    if kind in (None, "default"):
        return None
    return {k: v for k, v in params.items() if k != "rope_theta"}


def candidates_for(raw: dict, draft_config, target_config, tensors: dict) -> list[ReadingCandidate]:
    """One change at a time against the checkpoint as read."""
    found = [ReadingCandidate("the reading under test", "declared")]
    own = rope_theta(draft_config.llama_config)
    target_theta = rope_theta(target_config)
    thetas = [target_theta] + [t for t in COMMON_THETAS]
    seen = {own}
    for theta in thetas:
        if theta is not None and theta not in seen:
            seen.add(theta)
            whose = " (the target's)" if theta == target_theta else ""
            found.append(ReadingCandidate(f"rope_theta {theta:g}{whose}", "rope", {"rope_theta": theta}))
    target_scaling = rope_scaling(target_config)
    if target_scaling and not rope_scaling(draft_config.llama_config):
        found.append(ReadingCandidate("the target's rope_scaling", "rope", {"rope_scaling": target_scaling}))
    for offset in (-1, 1):
        found.append(ReadingCandidate(f"drafted positions {offset:+d}", "offset", offset=offset))
    weights = {
        "fc_norm": any(name.startswith("fc_norm.") for name in tensors),
        "norm_before_fc": "input_norm.weight" in tensors,
    }
    for flag in FLAGS:
        for value in (True, False):
            if getattr(draft_config, flag) == value:
                continue
            if value and flag in weights and not weights[flag]:
                continue  # no weights for the module: that reading cannot have been trained
            found.append(ReadingCandidate(f"{flag}: {str(value).lower()}", "flag", {flag: value}))
    found.append(
        ReadingCandidate("the other feedback (pre-/post-norm)", "feedback", math_change={"feedback": True})
    )
    return found


def _prepare(candidate, files, raw, target, base_draft, base_math, view_of):
    """The draft module and math a candidate runs (None when its config cannot be built)."""
    if not candidate.patch:
        draft, math = base_draft, base_math
    else:
        try:
            config = parse_draft_config({**raw, **candidate.patch}, f"{files.path}/config.json (candidate)")
            patched = replace(files, config=config)
            report = check_draft(patched, target.model.config)
            if not report.ok:
                return None
            draft = build_draft(patched, target)
        except (BadInput, ValueError, RuntimeError):
            return None
        math = view_of(draft.config).math
    if candidate.math_change.get("feedback"):
        math = replace(math, post_norm_feedback=not math.post_norm_feedback)
    return draft, math


def run_reading_probe(
    target: Target,
    draft_dir: str,
    wiring: Wiring,
    samples: list,
    engine: str = "auto",
    num_steps: int = 4,
    progress: Progress = no_progress,
) -> ReadingReport:
    """Score every candidate reading on `samples` (input_ids, loss_mask), chunk by chunk."""
    files = read_draft(draft_dir)
    raw = read_config_file(Path(files.path))
    has_own = "own_embedding.weight" in files.tensors

    def view_of(config):
        return read_as(engine, config, target.num_layers, has_own)

    base_draft = build_draft(files, target)
    base_math = view_of(files.config).math
    candidates = candidates_for(raw, files.config, target.model.config, files.tensors)
    ready, seen_math = [], set()
    for candidate in candidates:
        prepared = _prepare(candidate, files, raw, target, base_draft, base_math, view_of)
        if prepared is None:
            continue
        candidate.draft, candidate.math = prepared
        if candidate.dimension in ("flag", "feedback"):
            if candidate.math in seen_math or candidate.math == base_math:
                continue  # this reading gives the flag no other meaning: the same forward
            seen_math.add(candidate.math)
        ready.append(candidate)
    declared = ready[0]
    in_vocab = draft_vocab_mask(base_draft, target.vocab_size, target.device)
    used = 0
    report = ReadingReport(declared, ready, 0, engine)
    while used < len(samples):
        chunk = samples[used : used + CHUNK]
        for number, sample in enumerate(chunk):
            passed: TargetPass = target_pass(
                target, sample.input_ids, sample.loss_mask, wiring.aux_hf_indices
            )
            features = passed.features(wiring.aux_hf_indices)
            for candidate in ready:
                hits = draft_hits(
                    candidate.draft, passed, features, in_vocab, num_steps, candidate.math, candidate.offset
                )
                _add(candidate, hits)
            progress(
                min(1.0, (used + number + 1) / len(samples)), f"reading probe: sample {used + number + 1}"
            )
        used += len(chunk)
        report = ReadingReport(declared, sorted(ready, key=lambda c: c.accuracy, reverse=True), used, engine)
        best = report.candidates[0]
        separated = best is declared and all(
            declared.accuracy - c.accuracy > report.margin(c) for c in report.candidates[1:2]
        )
        if separated or (best is not declared and report.better() and not report.ties(best)):
            break
    return report


def _add(candidate: ReadingCandidate, hits: list) -> None:
    counts = TeacherCounts([int(c.sum()) for _, c in hits], [int(n.sum()) for n, _ in hits])
    candidate.hits += [correct[counted].cpu() for counted, correct in hits]
    if candidate.steps is None:
        candidate.steps = TeacherCounts([0] * len(counts.correct), [0] * len(counts.correct))
    totals = candidate.steps
    totals.add(counts)
    candidate.acc_per_step = totals.acc_per_step
    candidate.correct = sum(totals.correct)
    candidate.counted = sum(totals.counted)
