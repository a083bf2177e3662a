"""Teacher-forced draft accuracy on a sample's ground-truth tokens (SpecForge's acc_k).

Training-time test layout (docs/reference.md §5): the target runs once over the sample,
giving fused features A_t and its argmax g_t (its prediction for token t+1). TTT step 0 feeds
(A_t, x_{t+1}) at RoPE position t; step k feeds the draft's own step k-1 output with token
x_{t+1+k} at position t+k, attending to step 0's entries at positions <= t plus its own earlier
steps at the same index t (exactly what the inference chain sees). At step k, index t predicts
g_{t+1+k}.

Counting follows SpecForge: at step k, index t counts when loss_mask[t+k] is 1 (the mask is shifted
with the inputs); it is correct when the target's argmax g_{t+1+k} lies in the draft vocabulary
and the draft's top-1, mapped through d2t, equals it. Indices whose target token would lie past the
sample's end are not counted (SpecForge pads them with zeros).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import log

import torch

from backend.drafts.engine_readers import DraftMath
from backend.engine.draft_model import Eagle3Draft
from backend.engine.loading import Target
from backend.run.metrics import simulated_accept_length
from backend.run.wiring import Wiring
from backend.target.kv_cache import TTTCache


@dataclass
class TeacherCounts:
    correct: list[int]
    counted: list[int]

    def add(self, other: TeacherCounts) -> None:
        self.correct = [a + b for a, b in zip(self.correct, other.correct, strict=True)]
        self.counted = [a + b for a, b in zip(self.counted, other.counted, strict=True)]

    @property
    def acc_per_step(self) -> list[float | None]:
        return [c / n if n else None for c, n in zip(self.correct, self.counted, strict=True)]

    @property
    def simulated_accept_length(self) -> float | None:
        accs = self.acc_per_step
        return None if any(a is None for a in accs) else simulated_accept_length(accs)


def ttt_mask(length: int, step: int, device) -> torch.Tensor:
    """[m, (step+1)*m] bool: step 0's block causal, every later block (incl. the new one) diagonal."""
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    diagonal = torch.eye(length, dtype=torch.bool, device=device)
    return torch.cat([causal] + [diagonal] * step, dim=1)


def draft_vocab_mask(draft: Eagle3Draft, target_vocab: int, device) -> torch.Tensor:
    """True for target ids the draft can propose (t2d, rebuilt from d2t)."""
    mask = torch.zeros(target_vocab, dtype=torch.bool, device=device)
    ids = draft.to_target_ids(torch.arange(draft.config.draft_vocab_size, device=device))
    mask[ids[ids < target_vocab]] = True
    return mask


SOFT_TOP = 256  # the target tokens whose probability the training loss keeps (real pair: 99.7% of the mass)
# A position's training loss counts at most this many times what a draft that knows nothing (uniform
# over its vocabulary) pays, ln(draft vocab): a few confidently wrong positions cannot outweigh the
# rest (a hand-built draft with near one-hot logits pays ~30 nats there, a trained one rarely > 10).
LOSS_CAP = 2.0


@dataclass
class SoftTargets:
    """The target's distribution at each position restricted to the draft vocabulary and renormalised
    (what SpecForge and EAGLE-3 train the draft against), its SOFT_TOP most likely tokens: their
    probabilities [T, k] and draft-vocab indices [T, k]."""

    probs: torch.Tensor
    draft_ids: torch.Tensor


@dataclass
class TargetPass:
    """One target forward over a sample: residual-stream states by HF index, the argmax, and (when
    asked for) the target's distribution over the draft vocabulary."""

    ids: torch.Tensor  # [T]
    loss_mask: torch.Tensor  # [T] bool
    states: dict[int, torch.Tensor]  # HF index -> [T, Ht] (index L pre-norm)
    target_argmax: torch.Tensor  # [T]: g_t, the target's greedy prediction for token t+1
    soft: SoftTargets | None = None

    def features(self, aux_hf_indices) -> torch.Tensor:
        return torch.cat([self.states[i] for i in aux_hf_indices], dim=-1)


def target_pass(
    target: Target,
    input_ids: list[int],
    loss_mask: list[int],
    aux_hf_indices,
    soft_over: torch.Tensor | None = None,
) -> TargetPass:
    """The target's forward over the sample, through the runner replays use (a prefill). `soft_over`:
    the draft vocabulary as target ids (`Eagle3Draft.to_target_ids`); given, the pass keeps the
    target's distribution over it (`SoftTargets`) for the draft's training loss."""
    ids = torch.tensor(input_ids, device=target.device)
    runner = target.runner
    with torch.inference_mode():
        output = runner.forward(ids[None], runner.new_cache(), 0, capture=aux_hf_indices)
        logits = output.logits[0]
        soft = None
        if soft_over is not None:
            vocab = logits.shape[-1]
            restricted = logits[:, soft_over.clamp(max=vocab - 1)].float()
            restricted[:, soft_over >= vocab] = -torch.inf  # a draft id past the target's vocabulary
            probs = torch.softmax(restricted, dim=-1)
            top = probs.topk(min(SOFT_TOP, probs.shape[-1]), dim=-1)
            soft = SoftTargets(top.values, top.indices)
    target_argmax = logits.argmax(-1)
    return TargetPass(
        ids, torch.tensor(loss_mask, device=target.device).bool(), output.states, target_argmax, soft
    )


def teacher_forced_counts(
    target: Target,
    draft: Eagle3Draft,
    wiring: Wiring,
    input_ids: list[int],
    loss_mask: list[int],
    num_steps: int,
    math: DraftMath | None = None,
) -> TeacherCounts:
    if len(input_ids) < 3:
        return TeacherCounts([0] * num_steps, [0] * num_steps)
    passed = target_pass(target, input_ids, loss_mask, wiring.aux_hf_indices)
    in_vocab = draft_vocab_mask(draft, target.vocab_size, target.device)
    return draft_counts(draft, passed, passed.features(wiring.aux_hf_indices), in_vocab, num_steps, math)


def target_to_draft(draft: Eagle3Draft, target_vocab: int, device) -> torch.Tensor:
    """[target vocab] -> draft-vocab index of each target id, -1 where the draft cannot propose it."""
    draft_ids = torch.arange(draft.config.draft_vocab_size, device=device)
    target_ids = draft.to_target_ids(draft_ids)
    mapping = torch.full((target_vocab,), -1, dtype=torch.long, device=device)
    keep = target_ids < target_vocab
    mapping[target_ids[keep]] = draft_ids[keep]
    return mapping


@dataclass
class StepZeroScores:
    """Per counted position of one sample (`draft_step0_scores`)."""

    losses: torch.Tensor  # the draft's training loss (nats)
    probs: torch.Tensor  # the draft's probability of the target's greedy token (0 out of its vocabulary)
    hits: torch.Tensor  # bool: its argmax is that token (acc_0)


def draft_step0_scores(
    draft: Eagle3Draft,
    passed: TargetPass,
    features: torch.Tensor,
    to_draft: torch.Tensor,
    math: DraftMath | None = None,
) -> StepZeroScores:
    """Step 0 of the TTT chain over one target pass (made with `soft_over`), at the counted
    (loss-masked) positions only: the draft's training loss there (cross-entropy, in nats, of its
    distribution against the target's `SoftTargets`), the probability it gives the target's greedy
    token, and whether its argmax is that token (acc_0's hit). Each loss is capped at LOSS_CAP *
    ln(draft vocabulary). The wiring probe compares candidate wirings on these, position by position
    (the same positions under every wiring). The head runs on the counted rows only: the lm_head is
    most of a draft forward's cost."""
    ids, mask, target_argmax = passed.ids, passed.loss_mask, passed.target_argmax
    device = ids.device
    total = len(ids)
    if total < 3:
        empty = torch.zeros(0, device=device)
        return StepZeroScores(empty, empty, empty.bool())
    with torch.inference_mode():
        length = total - 1
        index = torch.arange(length, device=device)
        fused = draft.fuse(features[:length].to(draft.fc.weight.dtype), math)
        hidden = draft(
            fused,
            ids[index + 1],
            index,
            TTTCache(len(draft.layers)),
            mask=ttt_mask(length, 0, device),
            math=math,
        )
        rows = mask[index].nonzero().squeeze(-1)
        logits = draft.logits(hidden[rows], math).float()
        log_probs = torch.log_softmax(logits, dim=-1)
        truth = to_draft[target_argmax[rows + 1]]
        known = truth >= 0
        probs = torch.where(known, log_probs.gather(-1, truth.clamp(min=0)[:, None]).squeeze(-1).exp(), 0.0)
        hits = known & (logits.argmax(-1) == truth)
        soft = passed.soft
        losses = -(soft.probs[rows + 1] * log_probs.gather(-1, soft.draft_ids[rows + 1])).sum(-1)
        losses = losses.clamp(max=LOSS_CAP * log(logits.shape[-1]))
    return StepZeroScores(losses, probs, hits)


def draft_counts(
    draft: Eagle3Draft,
    passed: TargetPass,
    features: torch.Tensor,
    in_vocab: torch.Tensor,
    num_steps: int,
    math: DraftMath | None = None,
    position_offset: int = 0,
) -> TeacherCounts:
    """The draft's side of acc_k: the TTT chain over one target pass, fed `features` [T, 3*Ht].
    The sums of `draft_hits`.
    `position_offset` shifts the RoPE positions of the chain steps (k >= 1) against the context they
    attend to (an engine that feeds the drafted tokens' positions one off: the reading probe's
    position-offset candidates). A shift of every position changes nothing under RoPE, whose
    attention sees only relative positions, so only this relative shift is a reading of its own."""
    counts = TeacherCounts([0] * num_steps, [0] * num_steps)
    for step, (counted, correct) in enumerate(
        draft_hits(draft, passed, features, in_vocab, num_steps, math, position_offset)
    ):
        counts.counted[step] += int(counted.sum())
        counts.correct[step] += int(correct.sum())
    return counts


def draft_hits(
    draft: Eagle3Draft,
    passed: TargetPass,
    features: torch.Tensor,
    in_vocab: torch.Tensor,
    num_steps: int,
    math: DraftMath | None = None,
    position_offset: int = 0,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per TTT step, (counted, correct) bool masks over the indices t: which positions count and which
    the draft got right. Two readings scored on one target pass count the same positions, so their
    masks pair up (the reading probe's paired comparison)."""
    ids, mask, target_argmax = passed.ids, passed.loss_mask, passed.target_argmax
    device = ids.device
    total = len(ids)
    if total < 3:
        empty = torch.zeros(0, dtype=torch.bool, device=device)
        return [(empty, empty)] * num_steps
    hits = []
    with torch.inference_mode():
        length = total - 1  # index t = 0..T-2 has a next token x_{t+1}
        index = torch.arange(length, device=device)
        hidden = draft.fuse(features[:length].to(draft.fc.weight.dtype), math)
        cache = TTTCache(len(draft.layers))  # each step's keys/values, a block per step
        for step in range(num_steps):
            token_index = (index + 1 + step).clamp(max=total - 1)
            positions = index + step + (position_offset if step else 0)
            fed = draft.feedback(hidden, math) if step else hidden  # step 0 is fed the fused features
            hidden = draft(
                fed, ids[token_index], positions, cache, mask=ttt_mask(length, step, device), math=math
            )
            predicted = draft.to_target_ids(draft.logits(hidden, math).argmax(-1))
            valid = index + 1 + step <= total - 1
            truth = target_argmax[token_index]
            counted = valid & mask[(index + step).clamp(max=total - 1)]
            hits.append((counted, counted & in_vocab[truth] & (predicted == truth)))
    return hits
