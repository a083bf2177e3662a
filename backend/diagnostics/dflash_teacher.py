"""A DFlash draft's teacher-forced accuracy: at every anchor of the samples' loss-masked positions, the
block [x_a, mask x K] over the target's own states before the anchor, each slot against the sample's
tokens. This is the inference setup exactly wherever the sample is the target's own continuation (a
DFlash block's context is always the target's states, never the draft's), so the mean leading run of
correct slots at an anchor is the accepted count a replay gets at a step starting there (a test holds
them equal); its mean + 1 over every anchor is the accept length at K if a step could start anywhere
(a replay visits only the anchors its steps reach, so its own mean differs). The slot rates are
marginal (slot k is drafted without knowing whether the slots before it are right)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from backend.engine.dflash_objective import anchor_positions, block_mask
from backend.plain import OMIT, Plain
from backend.target.capture import AuxCapture

ANCHORS = 10_000  # every valid anchor (a sample has fewer)


@dataclass
class SlotAccuracy(Plain):
    num_steps: int = 0
    n_anchors: int = 0
    slot_accuracy: list[float] = field(default_factory=list)  # P(slot k right), k = 1..K
    prefix_rates: list[float] = field(default_factory=list)  # P(slots 1..k all right)
    predicted_accept_length: float | None = None  # 1 + mean leading run of right slots, every anchor
    # (sample index, anchor position) -> its leading run of right slots (never stored)
    runs: dict = field(default_factory=dict, repr=False, compare=False, metadata={OMIT: True})


def slot_accuracy(target, draft, wiring, samples: list, num_steps: int, progress=None) -> SlotAccuracy:
    """Teacher-forced blocks of K = `num_steps` drafts at every anchor of `samples` (input_ids, loss_mask)."""
    right = torch.zeros(num_steps)
    runs: dict[tuple[int, int], int] = {}
    with torch.inference_mode(), AuxCapture(target.model, wiring.aux_hf_indices) as capture:
        for number, sample in enumerate(samples):
            ids = torch.tensor(sample.input_ids)
            target.model.model(input_ids=ids[None].to(target.device))
            states = torch.cat([capture.captured[i][0] for i in wiring.aux_hf_indices], dim=-1)
            length = len(ids)
            anchors = [
                a
                for a in anchor_positions(torch.tensor(sample.loss_mask), ANCHORS, None)
                if a + num_steps < length
            ]
            if anchors:
                block = num_steps + 1
                places = torch.tensor(anchors)[:, None] + torch.arange(block)[None, :]
                tokens = torch.full((len(anchors), block), draft.mask_token_id, dtype=torch.long)
                tokens[:, 0] = ids[torch.tensor(anchors)]
                context = draft.context(states, torch.arange(length))
                hidden = draft.block(
                    tokens.flatten(), places.flatten(), context, block_mask(anchors, block, length)
                )
                guessed = draft.logits(hidden).argmax(-1).view(len(anchors), block)[:, 1:].cpu()
                correct = guessed == ids[places[:, 1:]]
                right += correct.float().sum(0)
                led = correct.int().cumprod(dim=1).sum(1).tolist()
                runs |= {(number, a): r for a, r in zip(anchors, led, strict=True)}
            if progress:
                progress((number + 1) / len(samples), f"sample {number + 1}/{len(samples)}")
    n, led = len(runs), list(runs.values())
    if not n:
        return SlotAccuracy(num_steps)
    return SlotAccuracy(
        num_steps,
        n,
        (right / n).tolist(),
        [sum(r >= k for r in led) / n for k in range(1, num_steps + 1)],
        1 + sum(led) / n,
        runs,
    )
