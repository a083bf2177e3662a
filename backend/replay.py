"""Greedy chain speculative decoding (topk = 1, K draft steps), replayed one verify step at a time.

Pending-token convention (eagle3-reference.md sections 3-4): the target cache holds the committed
prefix except the newest token x_n. Each step:

  1. draft catch-up: the draft runs over the positions the target just committed, with inputs
     (A_p, x_{p+1}) at RoPE position p, where A_p are the target's fused aux features;
  2. draft chain: from the last catch-up output, K-1 more steps with (out_prev, d_j) at n-1+j;
  3. verify: the target runs [x_n, d_1..d_K] at positions n..n+K; row i predicts the token after n+i;
  4. accept the longest prefix with d_i == argmax(row i-1); the bonus is argmax(row a);
  5. roll back: target cache keeps x_n, d_1..d_a; the draft cache drops its speculative entries.

Every step emits a + 1 tokens, so the output equals the target's plain greedy output.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from backend.checkpoints import Target
from backend.draft_model import Eagle3Draft
from backend.kv_cache import DraftKVCache, crop_target_cache, new_target_cache, target_forward
from backend.wiring import AuxCapture, Wiring


@dataclass(frozen=True)
class ReplayConfig:
    num_steps: int = 4  # K: drafted tokens per verify step
    max_new_tokens: int = 128
    record: bool = True  # probabilities, top-k alternatives and hidden states
    top_alternatives: int = 5

    def __post_init__(self):
        if self.num_steps < 1:
            raise ValueError("num_steps (K) must be >= 1")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")


@dataclass
class PrefillRecord:
    prompt_ids: list[int]
    first_token: int  # the target's greedy token after the prompt: output_ids[0]
    prefill_ms: float
    aux_features: torch.Tensor | None  # [n, 3*Ht] fused features of the prompt positions


@dataclass
class StepRecord:
    step_index: int
    position: int  # position of the pending token x_n (verify row 0)
    pending_token: int
    drafted_ids: list[int]  # d_1..d_K, target-vocab ids
    accepted_count: int  # a: drafts accepted, 0..K
    bonus_id: int  # argmax of verify row a: the target's own token after the accepted drafts
    committed_ids: list[int]  # tokens this step added to the output (a + 1, fewer at EOS / the limit)
    target_argmax_ids: list[int]  # argmax of verify rows 0..K
    draft_ms: float
    verify_ms: float
    draft_probs: list[float] = field(default_factory=list)  # draft probability of each d_j
    draft_top_ids: list[list[int]] = field(default_factory=list)  # top alternatives per d_j (target ids)
    draft_top_probs: list[list[float]] = field(default_factory=list)
    target_argmax_probs: list[float] = field(default_factory=list)
    aux_features: torch.Tensor | None = None  # [a+1, 3*Ht] fused features of positions n..n+a
    draft_hidden: torch.Tensor | None = None  # [K, H] draft output hidden that proposed each d_j
    tree_parents: list[int] | None = None  # chain: None (reserved for topk > 1 trees)

    @property
    def rejection_index(self) -> int | None:
        """Index into drafted_ids of the first rejected draft (None when all K were accepted)."""
        return self.accepted_count if self.accepted_count < len(self.drafted_ids) else None


def accepted_prefix_length(drafted: list[int], target_argmax: list[int]) -> int:
    """Greedy acceptance: the longest prefix where d_i equals the argmax of the row before it."""
    accepted = 0
    while accepted < len(drafted) and drafted[accepted] == target_argmax[accepted]:
        accepted += 1
    return accepted


@dataclass
class Proposal:
    drafted_ids: list[int]
    probs: list[float]
    top_ids: list[list[int]]
    top_probs: list[list[float]]
    hidden: list[torch.Tensor]


def draft_catch_up(draft: Eagle3Draft, cache: DraftKVCache, features: torch.Tensor, next_tokens: list[int],
                   start: int) -> torch.Tensor:
    """Run the draft over committed positions start..start+m-1 with (A_p, x_{p+1}); return the last
    output hidden [1, H], from which d_1 is read."""
    device = features.device
    positions = torch.arange(start, start + len(next_tokens), device=device)
    hidden, _ = draft(draft.fuse(features), torch.tensor(next_tokens, device=device), positions, cache)
    return hidden[-1:]


def draft_chain(draft: Eagle3Draft, cache: DraftKVCache, hidden: torch.Tensor, position: int, num_steps: int,
                record: bool, top_k: int) -> Proposal:
    """Propose d_1..d_K. `hidden` is the catch-up output at `position` (= n-1); step j feeds
    (out_{j-1}, d_j) at RoPE position n-1+j."""
    proposal = Proposal([], [], [], [], [])
    for j in range(1, num_steps + 1):
        logits = draft.logits(hidden)[-1]
        draft_index = logits.argmax()
        target_id = int(draft.to_target_ids(draft_index))
        proposal.drafted_ids.append(target_id)
        if record:
            probs = torch.softmax(logits, dim=-1)
            top = probs.topk(min(top_k, probs.shape[-1]))
            proposal.probs.append(float(probs[draft_index]))
            proposal.top_ids.append(draft.to_target_ids(top.indices).tolist())
            proposal.top_probs.append(top.values.tolist())
            proposal.hidden.append(hidden[-1].detach().to("cpu"))
        if j < num_steps:
            token = torch.tensor([target_id], device=hidden.device)
            pos = torch.tensor([position + j], device=hidden.device)
            hidden, _ = draft(hidden, token, pos, cache)
    return proposal


def replay(target: Target, draft: Eagle3Draft, prompt_ids: list[int], wiring: Wiring,
           config: ReplayConfig) -> Iterator[PrefillRecord | StepRecord]:
    """Yield a PrefillRecord, then one StepRecord per verify step, until EOS or max_new_tokens."""
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    model, device = target.model, target.device
    eos = set(target.eos_token_ids)
    with torch.inference_mode(), AuxCapture(model, wiring.aux_hf_indices) as capture:
        started = time.perf_counter()
        target_cache = new_target_cache(model)
        logits = target_forward(model, torch.tensor([prompt_ids], device=device), target_cache, 0).logits
        pending = int(logits[0, -1].argmax())
        features = capture.features()
        yield PrefillRecord(list(prompt_ids), pending, _ms(started),
                            features.to("cpu") if config.record else None)
        produced = 1
        if pending in eos or produced >= config.max_new_tokens:
            return
        n = len(prompt_ids)  # position of the pending token
        draft_cache = DraftKVCache(draft.config.num_layers)
        catch_up_features, catch_up_tokens, catch_up_start = features, list(prompt_ids[1:]) + [pending], 0
        step_index = 0
        while True:
            started = time.perf_counter()
            hidden = draft_catch_up(draft, draft_cache, catch_up_features, catch_up_tokens, catch_up_start)
            proposal = draft_chain(draft, draft_cache, hidden, n - 1, config.num_steps, config.record,
                                   config.top_alternatives)
            _sync(device)
            draft_ms = _ms(started)

            started = time.perf_counter()
            drafted = proposal.drafted_ids
            verify_logits = target_forward(model, torch.tensor([[pending] + drafted], device=device),
                                           target_cache, n).logits[0]
            target_argmax = verify_logits.argmax(-1).tolist()
            accepted = accepted_prefix_length(drafted, target_argmax)
            bonus = target_argmax[accepted]
            crop_target_cache(target_cache, n + accepted + 1)
            verify_features = capture.features()[: accepted + 1]
            draft_cache.crop_to(n)
            _sync(device)
            verify_ms = _ms(started)

            emitted = drafted[:accepted] + [bonus]
            committed = []
            for token in emitted:
                committed.append(token)
                produced += 1
                if token in eos or produced >= config.max_new_tokens:
                    break
            record = StepRecord(step_index, n, pending, drafted, accepted, bonus, committed, target_argmax,
                                draft_ms, verify_ms)
            if config.record:
                target_probs = torch.softmax(verify_logits.float(), dim=-1)
                record.target_argmax_probs = target_probs.max(-1).values.tolist()
                record.draft_probs, record.draft_top_ids = proposal.probs, proposal.top_ids
                record.draft_top_probs = proposal.top_probs
                # rows for positions n..n+c: a step cut short keeps no features past the output
                record.aux_features = verify_features[: min(len(committed), accepted) + 1].to("cpu")
                record.draft_hidden = torch.stack(proposal.hidden)
            yield record
            if len(committed) < len(emitted) or committed[-1] in eos or produced >= config.max_new_tokens:
                return
            catch_up_features, catch_up_tokens, catch_up_start = verify_features, emitted, n
            n += accepted + 1
            pending = bonus
            step_index += 1


def output_ids_of(records: list[PrefillRecord | StepRecord]) -> list[int]:
    """The generated ids after the prompt: the prefill's greedy token, then each step's committed ids."""
    output: list[int] = []
    for record in records:
        if isinstance(record, PrefillRecord):
            output.append(record.first_token)
        else:
            output.extend(record.committed_ids)
    return output


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
