"""The DFlash training objective (SpecForge's `OnlineDFlashModel`, specforge/core/dflash.py, now
specforge/algorithms/common/dflash_family_model.py): what demo/train_dflash.py lowers and what the DFlash
layer probe (backend/diagnostics/dflash_probe.py) scores candidate target layers with.

Per sample (input_ids, loss_mask, the target's states at the draft's layers [S, n*H]):
- anchors: positions a with loss_mask[a] and loss_mask[a + 1] set, up to `anchors` drawn without
  replacement (`_sample_anchor_positions`);
- a block per anchor: [input_ids[a], mask x (B - 1)] at positions a..a+B-1;
- the context: every position's states, which block j sees strictly before its anchor (kv < a_j), and
  its own B slots both ways, never another block (`create_dflash_sdpa_mask`);
- labels input_ids[a + k] (slot k predicts its own position), weight [k > 0] * loss_mask[a + k] *
  exp(-(k - 1) / gamma); the loss the weighted mean cross-entropy over the target's full vocabulary.
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F

from backend.engine.dflash_model import DFlashDraft

GAMMA = 7.0  # loss_decay_gamma in SpecForge's DFlash recipes


def anchor_positions(loss_mask: torch.Tensor, count: int, generator: random.Random | None) -> list[int]:
    valid = [a for a in range(len(loss_mask) - 1) if loss_mask[a] and loss_mask[a + 1]]
    if generator is None:
        return valid[:count]
    return sorted(generator.sample(valid, min(count, len(valid))))


def block_mask(anchors: list[int], block: int, context: int) -> torch.Tensor:
    """[Q, S + Q] bool, True = attend: block j sees context kv < a_j and its own slots."""
    q = len(anchors) * block
    mask = torch.zeros(q, context + q, dtype=torch.bool)
    for j, a in enumerate(anchors):
        rows = slice(j * block, (j + 1) * block)
        mask[rows, :a] = True
        mask[rows, context + j * block : context + (j + 1) * block] = True
    return mask


def anchored_blocks(
    draft: DFlashDraft, ids: torch.Tensor, states: torch.Tensor, anchors: list[int], block: int
):
    """The logits [N * block, V] of a block [x_a, mask x (block - 1)] at each anchor a, over the context
    of the sample's states before it (one forward, `block_mask`), and the blocks' positions [N, block]."""
    length = len(ids)
    places = torch.tensor(anchors)[:, None] + torch.arange(block)[None, :]
    tokens = torch.full((len(anchors), block), draft.mask_token_id, dtype=torch.long)
    tokens[:, 0] = ids[torch.tensor(anchors)]
    context = draft.context(states, torch.arange(length))
    hidden = draft.block(tokens.flatten(), places.flatten(), context, block_mask(anchors, block, length))
    return draft.logits(hidden), places


def sample_loss(
    draft: DFlashDraft, sample: dict, anchors: int, generator: random.Random | None, gamma: float = GAMMA
):
    """The weighted cross-entropy summed over one sample's blocks, its weight, the top-1 hits and the
    positions counted; None without an anchor. `generator` None: the first `anchors` valid anchors
    (a probe scores every candidate on the same blocks)."""
    ids, mask, states = sample["input_ids"], sample["loss_mask"], sample["states"].float()
    block, length = draft.config.block_size, len(ids)
    anchors = anchor_positions(mask, anchors, generator)
    if not anchors:
        return None
    offsets = torch.arange(block)
    logits, places = anchored_blocks(draft, ids, states, anchors, block)  # places [N, B]
    inside = places < length
    labels = ids[places.clamp(max=length - 1)]
    weight = inside & (offsets[None, :] > 0) & (mask[places.clamp(max=length - 1)] > 0)
    decay = torch.exp(-(offsets - 1).clamp(min=0).float() / gamma)
    weights = weight.float() * decay[None, :]
    losses = F.cross_entropy(logits, labels.flatten(), reduction="none")
    flat = weights.flatten()
    hits = ((logits.argmax(-1) == labels.flatten()) & weight.flatten()).sum()
    return (losses * flat).sum(), flat.sum(), hits, weight.sum()
