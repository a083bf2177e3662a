"""Training accuracy vs live acceptance, per sample: teacher-forced acc_k and the accept length they
predict next to the live greedy accept length (docs/seed-story.md: 74.7% accuracy but 1.9 accept length).

A sample is flagged when the live accept length is below FLAG_RATIO of the predicted one
(predicted = 1 + simulated accept length, bonus included so both count the same thing).

The result types are torch-free (the page draws them); the measuring imports the engine when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from backend.plain import KEY, Plain
from backend.run.metrics import acceptance_metrics
from backend.run.records import Progress, no_progress

FLAG_RATIO = 0.75
DEFINITION = (
    f"flagged: live accept length < {FLAG_RATIO} x predicted, predicted = 1 + sum_k prod_(j<=k) acc_j "
    "from this sample's teacher-forced acc_k"
)
DFLASH_DEFINITION = (
    f"flagged: live accept length < {FLAG_RATIO} x predicted; a DFlash draft's predicted = 1 + the mean "
    "leading run of right slots of its teacher-forced blocks at every anchor of the sample (acc_0: slot 1's "
    "accuracy; backend/diagnostics/dflash_teacher.py), where a replay's steps start only at the anchors "
    "they reach"
)


@dataclass(frozen=True)
class AgreementRow(Plain):
    """One sample: teacher-forced acc_k, the accept length they predict, the live one."""

    sample: int = field(metadata={KEY: "sample #"})
    source: str | None
    acc_0: float | None
    acc_per_step: list[float | None]
    predicted_accept_length: float | None = field(metadata={KEY: "predicted accept length"})
    live_accept_length: float | None = field(metadata={KEY: "live accept length"})
    flagged: bool


@dataclass(frozen=True)
class AgreementSummary(Plain):
    """The draft over the samples that have both accept lengths (`samples`; 0: none, and no means)."""

    samples: int
    flagged: bool
    mean_acc_0: float | None = field(default=None, metadata={KEY: "mean acc_0"})
    mean_predicted: float | None = field(default=None, metadata={KEY: "mean predicted accept length"})
    mean_live: float | None = field(default=None, metadata={KEY: "mean live accept length"})
    live_over_predicted: float | None = field(default=None, metadata={KEY: "live / predicted"})
    flag_ratio: float = FLAG_RATIO


@dataclass(frozen=True)
class Agreement(Plain):
    rows: list[AgreementRow]
    summary: AgreementSummary
    definition: str = DEFINITION


def teacher_vs_live(
    target,
    draft,
    wiring,
    samples: list,
    config,
    progress: Progress = no_progress,
    training_wiring=None,
) -> list[AgreementRow]:
    """Teacher-forced accuracy under `training_wiring` (what the training run measured; default: the
    serving wiring) next to live acceptance under `wiring` (what serving feeds), both with
    `config`'s K and draft math (a replay.ReplayConfig), the live replays `config.max_new_tokens` long."""
    from backend.diagnostics.dflash_teacher import slot_accuracy
    from backend.engine.batch import accept_lengths
    from backend.engine.teacher import teacher_forced_counts

    training_wiring = training_wiring or wiring
    num_steps, max_new_tokens, math = config.num_steps, config.max_new_tokens, config.math
    dflash = getattr(draft.config, "method", None) == "dflash"
    rows = []
    progress(0.0, f"live replays of {len(samples)} samples, batched")
    prompts = [list(sample.prompt_ids) for sample in samples]
    every_live = accept_lengths(target, draft, prompts, wiring, num_steps, max_new_tokens, math)
    for number, (sample, counts_live) in enumerate(zip(samples, every_live, strict=True)):
        progress(0.5 + 0.5 * number / len(samples), f"teacher-forced, sample {number + 1}/{len(samples)}")
        if dflash:  # its blocks at every anchor (DFLASH_DEFINITION)
            blocks = slot_accuracy(target, draft, training_wiring, [sample], num_steps)
            accuracy, predicted = blocks.slot_accuracy or [None], blocks.predicted_accept_length
        else:
            counts = teacher_forced_counts(
                target, draft, training_wiring, sample.input_ids, sample.loss_mask, num_steps, math
            )
            simulated, accuracy = counts.simulated_accept_length, counts.acc_per_step
            predicted = None if simulated is None else 1 + simulated
        live = acceptance_metrics(counts_live, num_steps).mean_accept_length
        rows.append(
            AgreementRow(
                sample=getattr(sample, "index", number),
                source=sample.source,
                acc_0=accuracy[0],
                acc_per_step=accuracy,
                predicted_accept_length=predicted,
                live_accept_length=live,
                flagged=predicted is not None and live is not None and live < FLAG_RATIO * predicted,
            )
        )
    return rows


def agreement_of(rows: list[AgreementRow], draft) -> Agreement:
    """The rows, their summary and the definition of `draft`'s prediction (EAGLE-3's chain or DFlash's blocks)."""
    dflash = getattr(draft.config, "method", None) == "dflash"
    return Agreement(rows, draft_summary(rows), DFLASH_DEFINITION if dflash else DEFINITION)


def draft_summary(rows: list[AgreementRow]) -> AgreementSummary:
    """The draft as a whole: mean teacher acc_0, mean predicted and live accept length over the samples
    that have both, and whether live falls far below what teacher accuracy predicts (same FLAG_RATIO
    as per sample, applied to the means)."""
    both = [r for r in rows if r.predicted_accept_length is not None and r.live_accept_length is not None]
    if not both:
        return AgreementSummary(0, False)
    predicted = sum(r.predicted_accept_length for r in both) / len(both)
    live = sum(r.live_accept_length for r in both) / len(both)
    return AgreementSummary(
        samples=len(both),
        flagged=live < FLAG_RATIO * predicted,
        mean_acc_0=sum(r.acc_0 for r in both) / len(both),
        mean_predicted=predicted,
        mean_live=live,
        live_over_predicted=live / predicted,
    )
