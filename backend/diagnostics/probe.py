"""Wiring probe: which three target hidden states was this draft trained on? (docs/reference.md §2, §5)

A draft fed the states it was trained on fits the target far better than one fed any other states.
The target runs once per sample capturing every HF index (0 = embedding output .. L = last layer,
pre-norm) and keeping its distribution over the draft vocabulary; each candidate is then one draft
forward (TTT step 0) whose head runs on the loss-masked positions only. Candidates are ranked by the
draft's training loss there: the cross-entropy of its distribution against the target's (restricted
to the draft vocabulary, as SpecForge and EAGLE-3 train it; the target's SOFT_TOP likeliest tokens),
the quantity training minimised on the trained wiring. acc_0 (the draft's argmax is the target's
greedy token) is reported beside it but does not rank: a 0/1 score per position, it is the noisiest
measure the forward gives (the real pair's miswired draft on 8 samples: acc_0 puts HF [0, 3, 15]
above the trained [0, 2, 15], 2.7 standard errors; on 32 samples the two are level, while the loss
ranks the trained wiring first on both).

Candidates are compared paired, position by position (the same positions under every wiring), so
what is easy or hard for every wiring cancels. Neighbouring positions' differences are correlated,
so the standard error of the mean difference comes from blocks of BLOCK consecutive counted positions
(a block-clustered standard error). The best is separated from another when the other's loss lies
T_SEPARATE such standard errors above the best's; else the two are tied, no wiring is written, and
the report says how many samples would separate them if the difference holds. The K-step acc_k and
the predicted accept length are computed for the best, the declared and the tied wirings only.

Candidates: the declared ids read in each convention, the defaults, +/-1 shifts of each declared
id, the embedding output (HF 0) in place of the low layer, the [embedding, a, b] shift of
docs/seed-story.md, then a coordinate search, one slot at a time, around the best so far.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from backend.diagnostics.probe_report import BY_ACCEPT_LENGTH, BY_LOSS, Ranking, verdict
from backend.diagnostics.probe_settings import Candidate, ProbeResult, ProbeSettings, sample_keys  # noqa: F401 (re-exported)
from backend.drafts.engine_readers import DraftMath
from backend.engine.batch import accept_lengths
from backend.engine.draft_model import Eagle3Draft
from backend.engine.loading import Target
from backend.engine.teacher import (
    TargetPass,
    TeacherCounts,
    draft_counts,
    draft_step0_scores,
    draft_vocab_mask,
    target_pass,
    target_to_draft,
)
from backend.run.metrics import acceptance_metrics
from backend.run.records import Progress, no_progress
from backend.run.wiring import Wiring, default_hf_indices

REPORTED = 6  # the candidates whose K-step acc_k is computed (best, declared, tied first)


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


def run_probe(
    target: Target,
    draft: Eagle3Draft,
    declared: Wiring,
    samples: list,
    settings: ProbeSettings | None = None,
    progress: Progress = no_progress,
    math: DraftMath | None = None,
    ran_by: str | None = None,
) -> ProbeResult:
    """Rank candidate wirings by the draft's teacher-forced training loss on `samples` (objects with
    input_ids and loss_mask; prompt_ids for live runs); acc_0 is reported beside it. The result keeps
    the pair, the settings it ran with and who ran it (`ran_by`)."""
    settings = settings or ProbeSettings()
    num_steps, search_budget, live_samples = settings.num_steps, settings.search_budget, settings.live_samples
    started = time.time()
    num_layers = target.num_layers
    every_index = list(range(num_layers + 1))
    draft_vocab = draft.to_target_ids(torch.arange(draft.config.draft_vocab_size, device=target.device))
    passes: list[TargetPass] = []
    for number, sample in enumerate(samples):
        passes.append(target_pass(target, sample.input_ids, sample.loss_mask, every_index, draft_vocab))
        progress(0.2 * (number + 1) / len(samples), f"target pass {number + 1}/{len(samples)}")
    in_vocab = draft_vocab_mask(draft, target.vocab_size, target.device)
    to_draft = target_to_draft(draft, target.vocab_size, target.device)
    evaluated: dict[tuple, Candidate] = {}

    def evaluate(indices: tuple, labels: list[str]) -> Candidate:
        if indices in evaluated:
            for label in labels:
                evaluated[indices].add_label(label)
            return evaluated[indices]
        scored = [draft_step0_scores(draft, p, p.features(indices), to_draft, math) for p in passes]
        counted = sum(len(s.losses) for s in scored)
        hits = sum(int(s.hits.sum()) for s in scored)
        candidate = Candidate(
            tuple(indices),
            "; ".join(dict.fromkeys(labels)),
            [hits / counted if counted else None] + [None] * (num_steps - 1),
            counted,
            loss=sum(float(s.losses.sum()) for s in scored) / counted if counted else None,
            position_loss=[s.losses for s in scored],
            mean_prob=sum(float(s.probs.sum()) for s in scored) / counted if counted else None,
        )
        evaluated[indices] = candidate
        return candidate

    def with_acc_k(candidate: Candidate) -> None:
        """The K-step acc_k of a reported candidate (the predicted accept length)."""
        counts = TeacherCounts([0] * num_steps, [0] * num_steps)
        for passed in passes:
            features = passed.features(candidate.aux_hf_indices)
            counts.add(draft_counts(draft, passed, features, in_vocab, num_steps, math))
        # acc_0 stays the step-0 score the ranking and the separation used (the same count, one head)
        candidate.acc_per_step = [candidate.acc_per_step[0], *counts.acc_per_step[1:]]

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
    for candidate in reported_candidates(ranked, declared_candidate, num_steps, len(samples)):
        with_acc_k(candidate)
    by = BY_LOSS
    if live_samples:
        ranked, by = _live(target, draft, declared_candidate, ranked, samples, settings, progress, math)
    ranking = Ranking(declared_candidate, ranked, len(samples), by)
    report = ranking.result(
        verdict(ranking, num_layers),
        declared.source,
        time.time() - started,
        num_steps,
        settings=settings.describe(samples),
        target=target.path,
        draft=draft.path,
        ran_by=ran_by,
    )
    progress(1.0, "done")
    return report


def _live(
    target, draft, declared: Candidate, ranked: list, samples: list, settings: ProbeSettings, progress, math
):
    """The live replays on the first `live_samples` samples (their accept lengths set on the candidates
    replayed), all in one batch: by step the lead, declared and runner-up; over traces every candidate,
    which then rank by their exact accept length (the training loss breaking ties). Returns the ranking
    and what ranks it."""
    live_samples = samples[: settings.live_samples]
    lead = Ranking(declared, ranked, len(samples)).tied[0]
    live = [lead, *(c for c in (declared, *ranked[:2]) if c is not lead)][:3]
    replayed = target
    if settings.via == "trace":  # the target once per sample, every layer; then every candidate
        progress(0.8, f"traces of {len(live_samples)} samples (every layer)")
        every_index = list(range(target.num_layers + 1))
        replayed = over_traces(target, live_samples, settings.live_tokens, every_index)
        live = [lead, *(c for c in ranked if c is not lead)]
    progress(0.85, f"live replays of {len(live)} candidates, one batch")
    wirings = [c.aux_hf_indices for c in live]
    counted = live_accept_lengths(
        replayed, draft, wirings, live_samples, settings.num_steps, settings.live_tokens, math
    )
    for candidate, counts in zip(live, counted, strict=True):
        candidate.live_counts = counts
        candidate.live_accept_length = acceptance_metrics(counts, settings.num_steps).mean_accept_length
    if settings.via != "trace":
        return ranked, BY_LOSS
    return sorted(
        ranked, key=lambda c: (c.live_accept_length or 0.0, c.score), reverse=True
    ), BY_ACCEPT_LENGTH


def reported_candidates(ranked: list[Candidate], declared: Candidate, num_steps: int, n_samples: int):
    """The candidates whose K-step acc_k the report shows: the best, the declared, the tied, then the
    next best, REPORTED in all."""
    tied = Ranking(declared, ranked, n_samples).tied
    reported: list[Candidate] = []
    for candidate in [ranked[0], declared, *tied, *ranked]:
        if all(candidate is not r for r in reported):
            reported.append(candidate)
    return reported[:REPORTED]


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


def over_traces(target: Target, samples: list, new_tokens: int, indices) -> Target:
    """`target` with its forward answered from traces of the samples' prompts (captured here, once):
    a live replay over it runs the draft alone and gives the step replay's counts (docs/traces.md)."""
    from backend.target.trace import TraceRunner
    from backend.target.trace_capture import capture_traces

    prompts = [list(s.prompt_ids) for s in samples]
    answers = [list(s.input_ids[s.prompt_len :]) for s in samples]  # the target's own, in regenerated data
    stops = [[frozenset(target.eos_token_ids)]] * len(samples)  # where the live replays (accept_lengths) end
    traces = capture_traces(target, prompts, new_tokens, indices, answers, stops)
    return replace(target, runner=TraceRunner(traces, target.vocab_size, target.device))


def live_accept_lengths(
    target: Target,
    draft: Eagle3Draft,
    wirings: list,
    samples: list,
    num_steps: int,
    max_new_tokens: int,
    math: DraftMath | None = None,
) -> list[list[int]]:
    """Per wiring (HF indices), the accepted count of every verify step of unrecorded replays of
    `samples` fed it (the live accept length, docs/reference.md §6): every wiring and sample one
    batch, so the draft's forwards serve all."""
    prompts = [list(sample.prompt_ids) for sample in samples]
    fed = [Wiring(tuple(indices), "probe candidate") for indices in wirings for _ in prompts]
    counts = accept_lengths(target, draft, prompts * len(wirings), fed, num_steps, max_new_tokens, math)
    return [
        [a for per_prompt in counts[n * len(prompts) : (n + 1) * len(prompts)] for a in per_prompt]
        for n in range(len(wirings))
    ]
