"""Training accuracy vs live acceptance, per sample: teacher-forced acc_k and the accept length they
predict next to the live greedy accept length (docs/seed-story.md: 74.7% accuracy but 1.9 accept length).

A sample is flagged when the live accept length is below FLAG_RATIO of the predicted one
(predicted = 1 + simulated accept length, bonus included so both count the same thing).
"""

from __future__ import annotations

from backend.engine.metrics import acceptance_metrics
from backend.engine.records import Progress, no_progress
from backend.engine.replay import ReplayConfig, accept_lengths
from backend.engine.teacher import teacher_forced_counts

FLAG_RATIO = 0.75
DEFINITION = (
    f"flagged: live accept length < {FLAG_RATIO} x predicted, predicted = 1 + sum_k prod_(j<=k) acc_j "
    "from this sample's teacher-forced acc_k"
)


def teacher_vs_live(
    target,
    draft,
    wiring,
    samples: list,
    config: ReplayConfig,
    progress: Progress = no_progress,
    training_wiring=None,
) -> list[dict]:
    """Teacher-forced accuracy under `training_wiring` (what the training run measured; default: the
    serving wiring) next to live acceptance under `wiring` (what serving feeds), both with
    `config`'s K and draft math, the live replays `config.max_new_tokens` long."""
    training_wiring = training_wiring or wiring
    num_steps, max_new_tokens, math = config.num_steps, config.max_new_tokens, config.math
    rows = []
    for number, sample in enumerate(samples):
        progress(number / len(samples), f"sample {number + 1}/{len(samples)}")
        counts = teacher_forced_counts(
            target, draft, training_wiring, sample.input_ids, sample.loss_mask, num_steps, math
        )
        simulated = counts.simulated_accept_length
        counts_live = accept_lengths(
            target, draft, sample.prompt_ids, wiring, num_steps, max_new_tokens, math
        )
        live = acceptance_metrics(counts_live, num_steps).mean_accept_length
        predicted = None if simulated is None else 1 + simulated
        rows.append(
            {
                "sample #": getattr(sample, "index", number),
                "source": sample.source,
                "acc_0": counts.acc_per_step[0],
                "acc_per_step": counts.acc_per_step,
                "predicted accept length": predicted,
                "live accept length": live,
                "flagged": predicted is not None and live is not None and live < FLAG_RATIO * predicted,
            }
        )
    return rows


def draft_summary(rows: list[dict]) -> dict:
    """The draft as a whole: mean teacher acc_0, mean predicted and live accept length over the samples
    that have both, and whether live falls far below what teacher accuracy predicts (same FLAG_RATIO
    as per sample, applied to the means)."""
    both = [
        r for r in rows if r["predicted accept length"] is not None and r["live accept length"] is not None
    ]
    if not both:
        return {"samples": 0, "flagged": False}
    mean = lambda key: sum(r[key] for r in both) / len(both)  # noqa: E731
    predicted, live = mean("predicted accept length"), mean("live accept length")
    return {
        "samples": len(both),
        "mean acc_0": mean("acc_0"),
        "mean predicted accept length": predicted,
        "mean live accept length": live,
        "live / predicted": live / predicted,
        "flag_ratio": FLAG_RATIO,
        "flagged": live < FLAG_RATIO * predicted,
    }
