"""Which target layers was a DFlash draft trained on? Its training loss under the declared
`dflash_config.target_layer_ids` and under the same ids shifted as a whole (the index-convention trap:
z-lab ids = HF hidden_states index - 1 = GGUF `dflash.target_layers` - 1 = vLLM aux id - 1, so a config
written in another convention is off by one everywhere).

Each candidate is scored by the DFlash objective itself (backend/engine/dflash_objective.py) on the
same blocks of the same samples (the first anchors of each), the target run once per sample with
every layer kept. Two candidates are told apart by their per-sample losses, paired: the difference's
mean in standard errors over the samples (T_SEPARATE, as the EAGLE-3 probe's)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from backend.diagnostics.probe_report import T_SEPARATE
from backend.engine.dflash_objective import sample_loss
from backend.plain import Plain
from backend.run.records import Progress, no_progress
from backend.target.capture import AuxCapture

SHIFTS = (-2, -1, 1, 2)
MIN_SAMPLES = 8  # fewer cannot separate two candidates (a t over 2 samples says nothing)
MIN_GAP = 0.02  # and the declared's loss must be this much higher (relative): neighbouring layers of a
# deep target carry nearly the same state, so a shift can score a hair better by chance or in truth
# without the declaration being wrong (SmolLM2: dflash vs one layer up, 6.145 vs 6.115 nats, same AL)


@dataclass
class LayerCandidate(Plain):
    target_layer_ids: list[int] = field(default_factory=list)  # z-lab ids (HF = id + 1)
    label: str = ""
    loss: float | None = None  # nats per weighted position
    slot_accuracy: float | None = None  # top-1 over the counted slots (k >= 1)
    per_sample: list[float] = field(default_factory=list)


@dataclass
class DFlashProbeResult(Plain):
    declared: LayerCandidate | None = None
    candidates: list[LayerCandidate] = field(default_factory=list)  # lowest loss first
    best: LayerCandidate | None = None
    confirmed: bool = False
    t: float | None = None  # the declared's loss above the best's, in paired standard errors
    verdict: str = ""
    fix: dict | None = None  # the config.json field to write, when the declared is separated
    n_samples: int = 0
    anchors: int = 0
    separated: bool = True  # the best is told apart from the runner-up (else the probe cannot say which)


def candidates_of(declared: list[int], num_layers: int) -> dict[tuple[int, ...], str]:
    found = {tuple(declared): "declared"}
    for shift in SHIFTS:
        moved = tuple(i + shift for i in declared)
        if all(0 <= i < num_layers for i in moved):
            found.setdefault(
                moved, f"declared {shift:+d}" + (" (HF indices written as z-lab ids)" if shift == -1 else "")
            )
    return found


def paired_t(best: list[float], other: list[float]) -> float | None:
    differences = [b - a for a, b in zip(best, other, strict=True)]
    n = len(differences)
    if n < 2:
        return None
    mean = sum(differences) / n
    variance = sum((d - mean) ** 2 for d in differences) / (n - 1)
    if variance == 0:
        return math.inf if mean > 0 else 0.0
    return mean / math.sqrt(variance / n)


def probe_layers(
    target, draft, samples: list, anchors: int = 32, progress: Progress = no_progress
) -> DFlashProbeResult:
    """Score the declared layers and their shifts on `samples` (input_ids, loss_mask)."""
    config = draft.config
    candidates = candidates_of(config.target_layer_ids, target.num_layers)
    every = sorted({i + 1 for ids in candidates for i in ids})
    scored = {ids: [0.0, 0.0, 0, 0, []] for ids in candidates}
    with torch.inference_mode(), AuxCapture(target.model, every) as capture:
        for number, sample in enumerate(samples):
            ids = torch.tensor(sample.input_ids)
            target.model.model(input_ids=ids[None].to(target.device))
            for layers in candidates:
                states = torch.cat([capture.captured[i + 1][0] for i in layers], dim=-1)
                part = sample_loss(  # the same weights and blocks, fed these layers
                    draft,
                    {"input_ids": ids, "loss_mask": torch.tensor(sample.loss_mask), "states": states},
                    anchors,
                    None,
                )
                if part is None:
                    continue
                total = scored[layers]
                total[0] += float(part[0])
                total[1] += float(part[1])
                total[2] += int(part[2])
                total[3] += int(part[3])
                total[4].append(float(part[0]) / max(float(part[1]), 1e-9))
            progress((number + 1) / len(samples), f"sample {number + 1}/{len(samples)}")
    ranked = [
        LayerCandidate(
            list(layers),
            candidates[layers],
            t[0] / t[1] if t[1] else None,
            t[2] / t[3] if t[3] else None,
            t[4],
        )
        for layers, t in scored.items()
    ]
    ranked.sort(key=lambda c: math.inf if c.loss is None else c.loss)
    declared = next(c for c in ranked if c.label == "declared")
    return judged(declared, ranked, len(samples), anchors, target.num_layers)


def judged(
    declared: LayerCandidate, ranked: list[LayerCandidate], n: int, anchors: int, layers: int
) -> DFlashProbeResult:
    best = ranked[0]
    t = None if best is declared else paired_t(best.per_sample, declared.per_sample)
    gap = 0.0 if best is declared or not best.loss else declared.loss / best.loss - 1
    confirmed = best is declared or t is None or t < T_SEPARATE or n < MIN_SAMPLES or gap < MIN_GAP
    hf = [i + 1 for i in best.target_layer_ids]
    runner = ranked[1] if best is declared and len(ranked) > 1 else None
    runner_t = None if runner is None else paired_t(best.per_sample, runner.per_sample)
    runner_gap = 0.0 if runner is None or not best.loss else runner.loss / best.loss - 1
    separated = runner is None or (
        runner_t is not None and runner_t >= T_SEPARATE and n >= MIN_SAMPLES and runner_gap >= MIN_GAP
    )
    rule = (
        f"separating takes {T_SEPARATE:g} standard errors, {MIN_SAMPLES} samples and a {100 * MIN_GAP:g}% gap"
    )
    if best is declared and separated:
        verdict = (
            f"The declared target_layer_ids {declared.target_layer_ids} (HF {[i + 1 for i in declared.target_layer_ids]}) "
            f"are the trained ones: loss {declared.loss:.3f} nats, the lowest of {len(ranked)} candidates"
            + (
                ""
                if runner is None
                else f", apart from the runner-up {runner.target_layer_ids} ({runner.loss:.3f}; {runner_t:.1f} "
                f"paired standard errors over {n} samples)"
            )
            + "."
        )
    elif best is declared:
        verdict = (
            f"The declared target_layer_ids {declared.target_layer_ids} score lowest ({declared.loss:.3f} nats) but are "
            f"not told apart from {runner.target_layer_ids} ({runner.loss:.3f}; {100 * runner_gap:.1f}% apart, "
            f"{'n/a' if runner_t is None else f'{runner_t:.1f}'} paired standard errors over {n} samples; {rule}): "
            "these samples cannot say which layers the draft was trained on. Probe more samples, or hold the "
            "draft against a served engine (serve-check) under each."
        )
    elif confirmed:
        verdict = (
            f"The declared target_layer_ids {declared.target_layer_ids} serve the draft about as well as any: "
            f"{best.target_layer_ids} scores {best.loss:.3f} vs {declared.loss:.3f} nats ({100 * gap:.1f}% apart, "
            f"{'n/a' if t is None else f'{t:.1f}'} paired standard errors over {n} samples; {rule})."
        )
    else:
        verdict = (
            f"The draft was most likely trained on target_layer_ids {best.target_layer_ids} (HF hidden_states {hf}), not "
            f"the declared {declared.target_layer_ids}: loss {best.loss:.3f} vs {declared.loss:.3f} nats, slot accuracy "
            f"{best.slot_accuracy:.3f} vs {declared.slot_accuracy:.3f} ({t:.1f} paired standard errors over {n} samples). "
            f"Write dflash_config.target_layer_ids = {best.target_layer_ids} (z-lab ids; llama.cpp's converter writes "
            f"dflash.target_layers = {hf}, vLLM captures HF {hf})."
        )
    return DFlashProbeResult(
        declared=declared,
        candidates=ranked,
        best=best,
        confirmed=confirmed,
        t=t,
        verdict=verdict,
        fix=None if confirmed else {"dflash_config": {"target_layer_ids": best.target_layer_ids}},
        n_samples=n,
        anchors=anchors,
        separated=separated and not (confirmed and best is not declared),
    )
