"""Train an EAGLE-3 draft with training-time test (docs/reference.md §5), using the engine's
own draft module, on target features computed once.

The layout is the one `backend.engine.teacher` evaluates: at TTT step k, index t consumes the draft's own
step k-1 output with token x_{t+1+k} at RoPE position t+k, attends to step 0's entries at positions
<= t plus its own earlier steps at index t, and learns the target's distribution at position t+1+k
restricted to the draft vocabulary. Loss weight 0.8^k; positions count when loss_mask[t+k] is 1 and
the target's argmax lies in the draft vocabulary. Several samples are packed into one sequence with
a block-diagonal mask.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from backend.drafts.draft_config import parse_draft_config
from backend.engine.draft_model import Eagle3Draft
from backend.target.kv_cache import TTTCache
from tests.support.synthetic import vocab_mapping

TTT_DECAY = 0.8


def draft_vocabulary(records: list[dict], draft_vocab: int) -> list[int]:
    """The `draft_vocab` most frequent loss-masked target ids (ties by id), sorted ascending."""
    counts = Counter(t for r in records for t, m in zip(r["input_ids"], r["loss_mask"], strict=True) if m)
    ranked = sorted(counts, key=lambda t: (-counts[t], t))[:draft_vocab]
    if len(ranked) < draft_vocab:  # too few distinct tokens: fill with the lowest unused ids
        seen = set(ranked)
        ranked += [t for t in range(draft_vocab * 2) if t not in seen][: draft_vocab - len(ranked)]
    return sorted(ranked)


def ranked_vocabulary(records: list[dict], target_vocab: int) -> list[int]:
    """Target ids in the order a draft vocabulary takes them: the training answers' tokens by frequency
    (ties by id), then the prompts' tokens by frequency, then every other id in id order (a BPE
    tokenizer's low ids are its earliest, most frequent merges)."""
    answers, prompts = Counter(), Counter()
    for r in records:
        for t, m in zip(r["input_ids"], r["loss_mask"], strict=True):
            (answers if m else prompts)[t] += 1
    ranked = sorted(answers, key=lambda t: (-answers[t], t))
    seen = set(ranked)
    ranked += [t for t in sorted(prompts, key=lambda t: (-prompts[t], t)) if t not in seen]
    seen = set(ranked)
    return ranked + [t for t in range(target_vocab) if t not in seen]


def new_draft(config_dict: dict, target, used_ids: list[int], seed: int, head_from_target: bool = False):
    """A fresh draft sharing (and never training) the target's embedding. `head_from_target`: its
    lm_head starts as the target's head rows for the draft vocabulary and its final norm as the
    target's (vLLM speculators' `load_verifier_weights`; SmolLM2's head is its tied embedding)."""
    torch.manual_seed(seed)
    draft = Eagle3Draft(parse_draft_config(config_dict), target.get_input_embeddings())
    d2t, _ = vocab_mapping(used_ids, target.config.vocab_size)
    draft.d2t.copy_(d2t)
    draft.has_vocab_mapping = True
    if head_from_target:
        with torch.no_grad():
            draft.lm_head.weight.copy_(target.lm_head.weight[torch.tensor(sorted(used_ids))])
            draft.norm.weight.copy_(target.model.norm.weight)
    return draft


def draft_tensors(draft: Eagle3Draft, used_ids: list[int], target_vocab: int) -> dict:
    tensors = {n: t.detach().clone() for n, t in draft.state_dict().items() if n != "d2t"}
    tensors["d2t"], tensors["t2d"] = vocab_mapping(used_ids, target_vocab)
    return tensors


def packs(lengths: list[int], max_tokens: int, generator: torch.Generator) -> list[list[int]]:
    order = torch.randperm(len(lengths), generator=generator).tolist()
    batches, current, used = [], [], 0
    for index in order:
        if current and used + lengths[index] > max_tokens:
            batches.append(current)
            current, used = [], 0
        current.append(index)
        used += lengths[index]
    return batches + ([current] if current else [])


def ttt_loss(
    draft: Eagle3Draft,
    target,
    used_ids: torch.Tensor,
    in_vocab: torch.Tensor,
    samples: list[dict],
    aux_columns: list[int],
    steps: int,
) -> tuple[torch.Tensor, list[int], list[int]]:
    """Weighted TTT loss over a pack of samples, and per step (correct, counted) top-1 tallies."""
    ids = torch.cat([s["input_ids"] for s in samples])
    loss_mask = torch.cat([s["loss_mask"] for s in samples]).bool()
    lengths = [len(s["input_ids"]) for s in samples]
    doc = torch.repeat_interleave(torch.arange(len(samples)), torch.tensor(lengths))
    starts = torch.tensor([0, *lengths[:-1]]).cumsum(0)[doc]
    position = torch.arange(len(ids)) - starts
    last = torch.tensor(lengths)[doc] - 1
    features = torch.cat([s["aux"][:, aux_columns].reshape(len(s["input_ids"]), -1).float() for s in samples])
    with torch.no_grad():
        final = torch.cat([s["final"].float() for s in samples])
        head = target.lm_head.weight
        if all("argmax" in s for s in samples):  # computed once with the features (a large vocabulary)
            target_argmax = torch.cat([s["argmax"] for s in samples])
        else:
            target_argmax = (final @ head.T).argmax(-1)
        target_probs = torch.softmax(final @ head[used_ids].T, dim=-1)
    same_doc = doc[:, None] == doc[None, :]
    causal = torch.ones_like(same_doc).tril() & same_doc
    diagonal = torch.eye(len(ids), dtype=torch.bool)
    hidden = draft.fuse(features)
    cache = TTTCache(len(draft.layers))  # each step's keys/values, concatenated (autograd-safe)
    total = torch.zeros(())
    correct, counted = [], []
    for step in range(steps):
        source = position + 1 + step
        token_index = starts + source.clamp(max=last)
        hidden = draft(
            hidden,
            ids[token_index],
            position + step,
            cache,
            mask=torch.cat([causal] + [diagonal] * step, dim=1),
        )
        logits = draft.logits(hidden)
        use = (
            (source <= last)
            & loss_mask[starts + (position + step).clamp(max=last)]
            & in_vocab[target_argmax[token_index]]
        )
        if use.any():
            log_probs = F.log_softmax(logits[use], dim=-1)
            total = total + TTT_DECAY**step * -(target_probs[token_index[use]] * log_probs).sum(-1).mean()
            predicted = used_ids[logits[use].argmax(-1)]
            correct.append(int((predicted == target_argmax[token_index[use]]).sum()))
        else:
            correct.append(0)
        counted.append(int(use.sum()))
    return total, correct, counted


@dataclass(frozen=True)
class DraftSchedule:
    """A draft's training run: epochs over the features, TTT steps per position, the random seed, tokens
    per packed batch and the peak learning rate."""

    epochs: int
    steps: int  # training-time-test steps (K)
    seed: int
    pack_tokens: int = 512
    peak_lr: float = 2e-3
    checkpoint: Path | None = None  # where the run's state is kept after each epoch (resumable)


def train_draft(
    draft: Eagle3Draft,
    target,
    used: list[int],
    features: list[dict],
    aux_columns: list[int],
    schedule: DraftSchedule,
    on_epoch=None,
    log=print,
) -> Eagle3Draft:
    """Train `draft` in place. `on_epoch(epoch, draft)` runs after each epoch (the draft in eval mode);
    a true return stops training there (early stopping). With `schedule.checkpoint`, the run's state (weights,
    optimizer, data order, epoch) is saved after every epoch and a stopped run resumes from it."""
    epochs, steps, seed, checkpoint = schedule.epochs, schedule.steps, schedule.seed, schedule.checkpoint
    pack_tokens, peak_lr = schedule.pack_tokens, schedule.peak_lr
    for parameter in target.parameters():
        parameter.requires_grad_(False)
    used_ids = torch.tensor(used)
    in_vocab = torch.zeros(target.config.vocab_size, dtype=torch.bool)
    in_vocab[used_ids] = True
    generator = torch.Generator().manual_seed(seed)
    lengths = [len(f["input_ids"]) for f in features]
    per_epoch = len(packs(lengths, pack_tokens, torch.Generator().manual_seed(seed)))
    total_updates = epochs * per_epoch
    optimizer = torch.optim.AdamW(draft.parameters(), lr=peak_lr, betas=(0.9, 0.95), weight_decay=0.0)
    update, start, first_epoch = 0, time.time(), 0
    if checkpoint is not None and checkpoint.exists():
        state = torch.load(checkpoint, weights_only=True)
        draft.load_state_dict(state["draft"])
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        update, first_epoch = state["update"], state["epoch"]
        log(f"resumed from {checkpoint} after epoch {first_epoch}")
        if state["stopped"]:
            draft.eval()
            return draft
    resumed_update = update
    draft.train()
    for epoch in range(first_epoch, epochs):
        tallies = [[0, 0] for _ in range(steps)]
        for batch in packs(lengths, pack_tokens, generator):
            warm = max(1, total_updates // 30)
            progress = max(0.0, (update - warm) / max(1, total_updates - warm))
            lr = (
                peak_lr
                * min(1.0, (update + 1) / warm)
                * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))
            )
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss, correct, counted = ttt_loss(
                draft, target, used_ids, in_vocab, [features[i] for i in batch], aux_columns, steps
            )
            loss.backward()
            torch.nn.utils.clip_grad_norm_(draft.parameters(), 0.5)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            for tally, c, n in zip(tallies, correct, counted, strict=True):
                tally[0] += c
                tally[1] += n
            update += 1
            if update % 20 == 0:
                elapsed = time.time() - start
                log(
                    f"draft update {update}/{total_updates}  loss {loss.item():.3f}  "
                    f"eta {elapsed / (update - resumed_update) * (total_updates - update) / 60:.1f} min"
                )
        accs = " ".join(f"{c / max(1, n):.3f}" for c, n in tallies)
        log(f"draft epoch {epoch + 1}/{epochs}: training acc_0..{steps - 1} = {accs}")
        stop = False
        if on_epoch is not None:
            draft.eval()
            stop = bool(on_epoch(epoch + 1, draft))
            draft.train()
        if checkpoint is not None:
            state = {
                "draft": draft.state_dict(),
                "optimizer": optimizer.state_dict(),
                "generator": generator.get_state(),
                "update": update,
                "epoch": epoch + 1,
                "stopped": stop,
            }
            torch.save(state, checkpoint.with_suffix(".partial"))
            checkpoint.with_suffix(".partial").replace(checkpoint)
        if stop:
            break
    draft.eval()
    return draft
