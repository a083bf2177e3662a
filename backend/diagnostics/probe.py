"""Wiring probe: which three target hidden states was this draft trained on? (docs/reference.md §2, §5)

A draft fed the states it was trained on predicts the target far better than one fed any other
states, so teacher-forced accuracy under candidate wirings ranks them. The target runs once per
sample capturing every HF index (0 = embedding output .. L = last layer, pre-norm); each candidate
is then only a draft TTT pass, so dozens of candidates cost seconds on small models.

Candidates: the declared ids read in each convention, the defaults, +/-1 shifts of each declared
id, the embedding output (HF 0) in place of the low layer, the [embedding, a, b] shift of docs/seed-story.md,
then a bounded coordinate search around the best so far.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from backend.diagnostics.probe_settings import ProbeSettings, sample_keys  # noqa: F401 (re-exported)
from backend.engine.draft_model import Eagle3Draft
from backend.engine.loading import Target
from backend.engine.metrics import acceptance_metrics, simulated_accept_length
from backend.engine.readings import DraftMath
from backend.engine.records import Progress, no_progress
from backend.engine.replay import accept_lengths
from backend.engine.teacher import TargetPass, TeacherCounts, draft_counts, draft_vocab_mask, target_pass
from backend.engine.wiring import Wiring, default_hf_indices

CONFIRM_MARGIN = 0.01  # the least acc_0 gap that counts against the declared wiring (see confirm_margin)


def confirm_margin(best: Candidate) -> float:
    """How far below the best candidate's acc_0 the declared wiring may score and still be the trained
    one: two binomial standard errors of acc_0 over the positions counted (sqrt(p(1-p)/n)), at least
    CONFIRM_MARGIN. In a deep target neighbouring layers carry nearly the same residual stream (the
    demo's HF 5 and 6: cosine ~0.9), so a ±1 neighbour of the trained wiring can score a point higher
    on a few samples by chance; a gap inside this margin is no evidence of a mis-wiring."""
    n, p = best.n_positions, best.acc_step0
    if n <= 0:
        return CONFIRM_MARGIN
    return max(CONFIRM_MARGIN, 2 * math.sqrt(p * (1 - p) / n))


@dataclass
class Candidate:
    aux_hf_indices: tuple[int, ...]
    labels: list[str]
    acc_per_step: list[float | None] = field(default_factory=list)
    n_positions: int = 0
    live_accept_length: float | None = None

    @property
    def acc_step0(self) -> float:
        if not self.acc_per_step or self.acc_per_step[0] is None:
            return 0.0
        return self.acc_per_step[0]

    @property
    def simulated(self) -> float | None:
        if not self.acc_per_step or any(a is None for a in self.acc_per_step):
            return None
        return simulated_accept_length(self.acc_per_step)

    @property
    def score(self) -> tuple[float, float]:
        return (self.simulated or 0.0, self.acc_step0)

    def to_dict(self) -> dict:
        return {
            "aux_hf_indices": list(self.aux_hf_indices),
            "label": "; ".join(self.labels),
            "acc_step0": self.acc_step0,
            "acc_per_step": self.acc_per_step,
            "simulated_accept_length": self.simulated,
            "predicted_accept_length": None if self.simulated is None else 1 + self.simulated,
            "n_positions": self.n_positions,
            "live_accept_length": self.live_accept_length,
        }


@dataclass
class ProbeReport:
    declared: Candidate
    declared_source: str
    candidates: list[Candidate]  # best first
    verdict: str
    sglang_ids: list[int]
    vllm_ids: list[int]
    seconds: float
    num_steps: int
    n_samples: int

    @property
    def best(self) -> Candidate:
        return self.candidates[0]

    @property
    def confirmed(self) -> bool:
        return (
            self.best.aux_hf_indices == self.declared.aux_hf_indices
            or self.declared.acc_step0 >= self.best.acc_step0 - confirm_margin(self.best)
        )

    @property
    def as_good(self) -> list[Candidate]:
        """Candidates other than the best whose acc_0 lies within the noise of the best's
        (confirm_margin): on these samples they cannot be told from it. In a deep target two
        neighbouring layers (HF 1 and 2, say) can carry nearly the same state, so a draft trained on
        one is served as well by the other."""
        floor = self.best.acc_step0 - confirm_margin(self.best)
        return [c for c in self.candidates[1:] if c.acc_step0 >= floor]

    @property
    def tied(self) -> list[Candidate]:
        """The one set of wirings the samples cannot tell apart, best first: every view names these
        (the headline, the evidence, the fix, the lint). Just the declared one when it is confirmed."""
        if self.confirmed:
            return [self.declared]
        return [self.best, *(c for c in self.as_good if c is not self.declared)]

    @property
    def separated(self) -> bool:
        """One wiring stands out: a fix may write it. Otherwise the fix says how to separate them."""
        return len(self.tied) == 1

    def how_to_separate(self, draft_dir: str | None = None) -> str:
        names = " / ".join(f"HF {list(c.aux_hf_indices)}" for c in self.tied)
        return (
            f"{self.n_samples} samples cannot tell {names} apart, so no wiring is written yet: run the probe on more "
            f"samples (python -m backend probe --draft {draft_dir or 'DRAFT'} --samples FILE --limit {4 * self.n_samples}, "
            "or the Wiring probe tab with more samples), or hold the served features against the draft's training "
            "features (Train vs serve). Until then each of them serves the draft about as well."
        )

    def to_dict(self) -> dict:
        return {
            "declared": {**self.declared.to_dict(), "source": self.declared_source},
            "candidates": [c.to_dict() for c in self.candidates],
            "best": self.best.to_dict(),
            "verdict": self.verdict,
            "confirmed": self.confirmed,
            "confirm_margin": confirm_margin(self.best),
            "as_good_as_best": [list(c.aux_hf_indices) for c in self.as_good],
            "tied": [list(c.aux_hf_indices) for c in self.tied],
            "separated": self.separated,
            "config": {
                "sglang": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": self.sglang_ids}},
                "vllm": {"eagle_aux_hidden_state_layer_ids": self.vllm_ids},
            }
            if self.separated
            else None,
            "how_to_separate": None if self.separated else self.how_to_separate(),
            "seconds": self.seconds,
            "num_steps": self.num_steps,
            "n_samples": self.n_samples,
        }


def initial_candidates(draft: Eagle3Draft, declared: Wiring, num_layers: int) -> dict[tuple, list[str]]:
    """Candidate HF-index triples with why each is tried (several reasons may name the same triple)."""
    found: dict[tuple, list[str]] = {}

    def add(indices, label, as_given: bool = False):
        # a declared wiring that repeats an index is run as given (engines allow it); the other
        # candidates are distinct layers, as every trainer writes them
        indices = tuple(indices)
        distinct = as_given or len(set(indices)) == 3
        if len(indices) == 3 and all(0 <= i <= num_layers for i in indices) and distinct:
            found.setdefault(indices, [])
            if label not in found[indices]:
                found[indices].append(label)

    config = draft.config
    hf = list(declared.aux_hf_indices)
    add(hf, "declared", as_given=True)
    if config.nested_aux_ids is not None:
        add([i + 1 for i in config.nested_aux_ids], "nested ids as output-of-layer (SGLang)")
        add(config.nested_aux_ids, "nested ids read as HF indices")
    if config.top_level_aux_ids is not None:
        add(config.top_level_aux_ids, "top-level ids as HF indices (vLLM)")
        add([i + 1 for i in config.top_level_aux_ids], "top-level ids read as output-of-layer")
    add(default_hf_indices(num_layers), "default [2, L//2, L-3]")
    add([i - 1 for i in hf], "declared shifted -1")
    add([i + 1 for i in hf], "declared shifted +1")
    for slot in range(3):
        for delta in (-1, 1):
            shifted = list(hf)
            shifted[slot] += delta
            add(shifted, f"declared id {slot} {delta:+d}")
    add([0, hf[1], hf[2]], "embedding output for the low layer")
    add([0, hf[0], hf[1]], "embedding, low, middle (the shift in docs/seed-story.md)")
    return found


def describe(indices, num_layers: int) -> str:
    names = ["embedding output" if i == 0 else f"output of layer {i - 1}" for i in indices]
    return f"HF {list(indices)} ({', '.join(names)})"


def run_probe(
    target: Target,
    draft: Eagle3Draft,
    declared: Wiring,
    samples: list,
    settings: ProbeSettings | None = None,
    progress: Progress = no_progress,
    math: DraftMath | None = None,
) -> ProbeReport:
    """Rank candidate wirings by teacher-forced accuracy on `samples` (objects with input_ids and
    loss_mask; prompt_ids for live runs)."""
    settings = settings or ProbeSettings()
    num_steps, search_budget, live_samples = settings.num_steps, settings.search_budget, settings.live_samples
    started = time.time()
    num_layers = target.num_layers
    every_index = list(range(num_layers + 1))
    passes: list[TargetPass] = []
    for number, sample in enumerate(samples):
        passes.append(target_pass(target, sample.input_ids, sample.loss_mask, every_index))
        progress(0.2 * (number + 1) / len(samples), f"target pass {number + 1}/{len(samples)}")
    in_vocab = draft_vocab_mask(draft, target.vocab_size, target.device)
    evaluated: dict[tuple, Candidate] = {}

    def evaluate(indices: tuple, labels: list[str]) -> Candidate:
        if indices in evaluated:
            for label in labels:
                if label not in evaluated[indices].labels:
                    evaluated[indices].labels.append(label)
            return evaluated[indices]
        counts = TeacherCounts([0] * num_steps, [0] * num_steps)
        for passed in passes:
            counts.add(draft_counts(draft, passed, passed.features(indices), in_vocab, num_steps, math))
        candidate = Candidate(indices, list(labels), counts.acc_per_step, counts.counted[0])
        evaluated[indices] = candidate
        return candidate

    initial = initial_candidates(draft, declared, num_layers)
    total = len(initial) + search_budget
    for number, (indices, labels) in enumerate(initial.items()):
        evaluate(indices, labels)
        progress(0.2 + 0.6 * number / total, f"candidate {number + 1}/{len(initial)}: HF {list(indices)}")
    _search(
        evaluate,
        evaluated,
        num_layers,
        search_budget,
        lambda n: progress(0.2 + 0.6 * (len(initial) + n) / total, f"search {n}/{search_budget}"),
    )
    ranked = sorted(evaluated.values(), key=lambda c: c.score, reverse=True)
    declared_candidate = evaluated[tuple(declared.aux_hf_indices)]
    if live_samples:
        live = (
            [ranked[0]] + ([declared_candidate] if declared_candidate is not ranked[0] else []) + ranked[1:2]
        )
        for number, candidate in enumerate(live):
            progress(0.8 + 0.2 * number / len(live), f"live replay HF {list(candidate.aux_hf_indices)}")
            candidate.live_accept_length = live_accept_length(
                target,
                draft,
                candidate.aux_hf_indices,
                samples[:live_samples],
                num_steps,
                settings.live_tokens,
                math,
            )
    report = ProbeReport(
        declared_candidate,
        declared.source,
        ranked,
        "",
        [],
        [],
        time.time() - started,
        num_steps,
        len(samples),
    )
    written = declared_candidate if report.confirmed else ranked[0]  # what the config should say
    report.sglang_ids = [i - 1 for i in written.aux_hf_indices]
    report.vllm_ids = list(written.aux_hf_indices)
    report.verdict = verdict(report, num_layers)
    progress(1.0, "done")
    return report


def _search(evaluate, evaluated: dict, num_layers: int, budget: int, tick) -> None:
    """Coordinate ascent from the best candidate: move one slot at a time to neighbouring indices
    (distance 1, then 2), keep any improvement, stop when nothing improves or the budget is spent."""
    spent = 0
    best = max(evaluated.values(), key=lambda c: c.score)
    improved = True
    while improved and spent < budget:
        improved = False
        for slot in range(3):
            for delta in (-1, 1, -2, 2):
                trial = list(best.aux_hf_indices)
                trial[slot] += delta
                trial_key = tuple(trial)
                # engines concatenate the states in layer order, so only ascending triples are searched
                if not 0 <= trial[0] < trial[1] < trial[2] <= num_layers or trial_key in evaluated:
                    continue
                if spent >= budget:
                    return
                candidate = evaluate(trial_key, ["search"])
                spent += 1
                tick(spent)
                if candidate.score > best.score:
                    best, improved = candidate, True


def live_accept_length(
    target: Target,
    draft: Eagle3Draft,
    indices,
    samples: list,
    num_steps: int,
    max_new_tokens: int,
    math: DraftMath | None = None,
) -> float | None:
    """Accept length of unrecorded replays of `samples` fed the wiring `indices` (docs/reference.md §6)."""
    wiring = Wiring(tuple(indices), "probe candidate")
    counts = [
        a
        for sample in samples
        for a in accept_lengths(target, draft, sample.prompt_ids, wiring, num_steps, max_new_tokens, math)
    ]
    return acceptance_metrics(counts, num_steps).mean_accept_length


def verdict(report: ProbeReport, num_layers: int) -> str:
    best, declared = report.best, report.declared
    config = (
        f"For SGLang write eagle_config.eagle_aux_hidden_state_layer_ids = {report.sglang_ids} "
        f"(nested, output-of-layer ids{'; -1 = embedding output' if 0 in best.aux_hf_indices else ''}); "
        f"for vLLM write top-level eagle_aux_hidden_state_layer_ids = {report.vllm_ids} (HF indices)."
    )
    if report.confirmed and best is not declared:
        return (
            f"The declared wiring {describe(declared.aux_hf_indices, num_layers)} is the trained one as far as "
            f"{report.n_samples} samples can tell: acc_0 {declared.acc_step0:.3f}, within the noise "
            f"(±{confirm_margin(best):.3f}, two standard errors over {best.n_positions} positions) of the best of "
            f"{len(report.candidates)} candidates, HF {list(best.aux_hf_indices)} at {best.acc_step0:.3f}. {config}"
        )
    if report.confirmed:
        runner = next((c for c in report.candidates if c is not declared), None)
        margin = f" (next best {list(runner.aux_hf_indices)}: acc_0 {runner.acc_step0:.3f})" if runner else ""
        return (
            f"The declared wiring {describe(declared.aux_hf_indices, num_layers)} is the trained one: "
            f"acc_0 {declared.acc_step0:.3f}, the best of {len(report.candidates)} candidates{margin}. {config}"
        )
    loss = ""
    if best.simulated and declared.simulated is not None:
        predicted_best, predicted_declared = 1 + best.simulated, 1 + declared.simulated
        loss = (
            f"; predicted accept length {predicted_declared:.2f} instead of {predicted_best:.2f} "
            f"({100 * (1 - predicted_declared / predicted_best):.0f}% lost)"
        )
    live = ""
    if best.live_accept_length is not None and declared.live_accept_length is not None:
        live = f"; live accept length {declared.live_accept_length:.2f} vs {best.live_accept_length:.2f}"
    tied = [c for c in report.as_good if c is not declared]
    if not tied:
        return (
            f"The draft was trained on {describe(best.aux_hf_indices, num_layers)}, not on the declared "
            f"{describe(declared.aux_hf_indices, num_layers)}: acc_0 {best.acc_step0:.3f} vs "
            f"{declared.acc_step0:.3f} with the declared wiring{loss}{live}. {config}"
        )
    others = ", ".join(f"HF {list(c.aux_hf_indices)} ({c.acc_step0:.3f})" for c in tied)
    return (
        f"The draft was not trained on the declared {describe(declared.aux_hf_indices, num_layers)}: "
        f"the best wiring, {describe(best.aux_hf_indices, num_layers)}, scores acc_0 {best.acc_step0:.3f} vs "
        f"{declared.acc_step0:.3f} with the declared wiring{loss}{live}. It is within the noise "
        f"(±{confirm_margin(best):.3f}, two standard errors over {best.n_positions} positions) of {others}. "
        + report.how_to_separate()
    )
