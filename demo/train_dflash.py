"""Train a DFlash draft the way SpecForge trains one (specforge/core/dflash.py `OnlineDFlashModel`, now
specforge/algorithms/common/dflash_family_model.py), with the replay's own draft module
(backend/engine/dflash_model.py), on target states computed once: the objective (anchors, blocks of
masks, the context before each anchor, the position-decayed loss) is backend/engine/dflash_objective.py;
this module is the loop (AdamW, warm-up then cosine, gradient clipping), the target's embedding and head
frozen."""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

import torch

from backend.engine.dflash_model import DFlashDraft
from backend.engine.dflash_objective import sample_loss


@dataclass(frozen=True)
class Schedule:
    epochs: int = 2
    anchors: int = 32  # per sample (SpecForge: 512; fewer keeps a 2-core CPU epoch near 15 minutes)
    gamma: float = 7.0
    lr: float = 6e-4
    warmup: float = 0.04
    batch: int = 8  # samples per optimizer step
    clip: float = 1.0
    seed: int = 2026


def train(
    draft: DFlashDraft, samples: list[dict], schedule: Schedule, log=print, on_epoch=None
) -> list[dict]:
    """Train `draft` in place (its fc, norms, layers; the target's embedding and head stay frozen);
    per epoch the mean loss and slot accuracy, and whatever `on_epoch(epoch, draft)` returns."""
    generator = random.Random(schedule.seed)
    params = [p for p in draft.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=schedule.lr, weight_decay=0.0)
    total = schedule.epochs * math.ceil(len(samples) / schedule.batch)
    warm = max(1, int(schedule.warmup * total))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, total - warm)))
        ),
    )
    curve = []
    draft.train()
    for epoch in range(1, schedule.epochs + 1):
        started, order = time.time(), list(range(len(samples)))
        generator.shuffle(order)
        seen = [0.0, 0.0, 0, 0]
        for first in range(0, len(order), schedule.batch):
            parts = [
                sample_loss(draft, samples[i], schedule.anchors, generator, schedule.gamma)
                for i in order[first : first + schedule.batch]
            ]
            parts = [p for p in parts if p is not None]
            if not parts:
                continue
            weight = sum(p[1] for p in parts)
            loss = sum(p[0] for p in parts) / (weight + 1e-6)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, schedule.clip)
            optimizer.step()
            scheduler.step()
            seen[0] += float(loss.detach()) * float(weight)
            seen[1] += float(weight)
            seen[2] += int(sum(p[2] for p in parts))
            seen[3] += int(sum(p[3] for p in parts))
            if (first // schedule.batch) % 20 == 0:
                log(f"epoch {epoch} batch {first // schedule.batch}: loss {float(loss.detach()):.3f}")
        row = {
            "epoch": epoch,
            "loss": seen[0] / max(seen[1], 1e-9),
            "slot_accuracy": seen[2] / max(seen[3], 1),
            "minutes": round((time.time() - started) / 60, 1),
        }
        draft.eval()
        if on_epoch is not None:
            row |= on_epoch(epoch, draft) or {}
        draft.train()
        curve.append(row)
        log(f"epoch {epoch}: {row}")
    draft.eval()
    return curve
