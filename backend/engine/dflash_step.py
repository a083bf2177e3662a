"""A DFlash draft's greedy chain of blocks: the EAGLE-3 chain's verify, judgement, roll-back, commit and
record (chain_step.Chain), with the block drafter's proposal (z-lab/dflash `dflash/model.py`
`dflash_generate`, the loop every engine follows):

1. context: the target's states at the positions it committed last (the prompt after the prefill;
   then x_n, d_1..d_a of the last verify) become context entries of every draft layer, so the
   context is exactly the positions before the pending token x_n;
2. block: one draft forward over [x_n, mask x K] at positions n..n+K, attending to the context and
   to itself both ways; d_k = argmax of the target's head at slot k (k = 1..K), its probability the
   softmax there. The block's own keys and values are dropped.
3-7. as the chain: verify [x_n, d_1..d_K], accept the longest agreeing prefix, bonus, commit, record.

K is the engine's (`num_speculative_tokens`, `--spec-draft-n-max`): the block is K + 1 rows whatever
`block_size` the draft was trained with (with attention both ways, every draft changes with K).
The per-position rates of a DFlash run read as one forward's slots, not a chain's steps.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from backend import BadInput
from backend.drafts.dflash_config import DFlashConfig, parse_dflash_config
from backend.drafts.json_config import read_json_object
from backend.engine.chain_step import Chain, DraftedStep, Proposal
from backend.engine.dflash_model import DFlashDraft
from backend.engine.step_state import ReplayConfig, elapsed_ms
from backend.run.wiring import Wiring
from backend.target.kv_cache import KVCache


def dflash_wiring(config: DFlashConfig) -> Wiring:
    """The target states the draft reads, as HF hidden_states indices (z-lab id + 1)."""
    return Wiring(
        config.aux_hf_indices,
        f"dflash_config.target_layer_ids {config.target_layer_ids} (z-lab ids; HF = id + 1)",
    )


def propose_block(
    draft: DFlashDraft, cache: KVCache, pending: int, position: int, steps: int, config: ReplayConfig
) -> Proposal:
    """2. The block [x_n, mask x steps] at positions n..n+steps over the cached context: the drafts,
    each one's probability, and (recording) the top alternatives and the slots' output states."""
    device = draft.fc.weight.device
    ids = torch.tensor([pending] + [draft.mask_token_id] * steps, device=device)
    positions = torch.arange(position, position + steps + 1, device=device)
    hidden = draft.block(ids, positions, draft.cached(cache))[1:]
    probs = torch.softmax(draft.logits(hidden), dim=-1)
    best = probs.max(-1)
    proposal = Proposal(drafted_ids=best.indices.tolist(), probs=best.values.tolist())
    if config.record:
        top = probs.topk(min(config.top_alternatives, probs.shape[-1]))
        proposal.top_ids, proposal.top_probs = top.indices.tolist(), top.values.tolist()
        proposal.hidden = list(hidden.detach().to("cpu"))
    return proposal


class DFlashChain(Chain):
    """One sample's chain of DFlash blocks (the caches: the target's and the draft's context)."""

    @staticmethod
    def extend_context(draft: DFlashDraft, cache: KVCache, cursor) -> None:
        """1. The positions the target committed last become context entries."""
        device = draft.fc.weight.device
        states = cursor.catch_up_features.to(device)
        start = cursor.catch_up_start
        draft.extend(cache, states, torch.arange(start, start + states.shape[0], device=device))

    def propose(self) -> DraftedStep:
        started = time.perf_counter()
        draft, cursor = self.draft, self.cursor
        device = draft.fc.weight.device
        self.extend_context(draft, self.caches.draft, cursor)  # 1
        proposal = Proposal()
        if self.num_drafts:  # the block is K + 1 rows even where fewer drafts are kept (llama.cpp's end)
            proposal = propose_block(
                draft, self.caches.draft, cursor.pending, cursor.position, self.config.num_steps, self.config
            )  # 2
            proposal = kept(proposal, self.num_drafts)
        return self.proposed(proposal, elapsed_ms(started, device))


def kept(proposal: Proposal, drafts: int) -> Proposal:
    """The first `drafts` of a block's proposals: llama.cpp decodes the whole K + 1 block and truncates
    the drafts to the tokens left (common/speculative.cpp `common_speculative_draft`, "truncating draft";
    tools/server/server-context.cpp `server_slot::get_n_draft_max`)."""
    if drafts >= len(proposal.drafted_ids):
        return proposal
    return Proposal(
        proposal.drafted_ids[:drafts],
        proposal.probs[:drafts],
        proposal.top_ids[:drafts],
        proposal.top_probs[:drafts],
        proposal.hidden[:drafts],
    )


def load_dflash(draft_dir: str | Path, target) -> DFlashDraft:
    """The DFlash draft in `draft_dir` (z-lab's format) beside `target` (its embeddings and head), on
    the target's device and dtype; BadInput naming the file and what is wrong."""
    from backend.engine.loading import IGNORABLE_SUFFIXES, read_draft_tensors

    draft_dir = Path(draft_dir)
    config = parse_dflash_config(read_json_object(draft_dir / "config.json"), str(draft_dir / "config.json"))
    check_against_target(config, target, draft_dir / "config.json")
    tensors, weights_file = read_draft_tensors(draft_dir)
    tensors = {n.removeprefix("model."): t for n, t in tensors.items() if not n.endswith(IGNORABLE_SUFFIXES)}
    head = target.model.get_output_embeddings()
    draft = DFlashDraft(config, target.model.get_input_embeddings(), head.weight)
    expected = draft.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise BadInput(
            f"{draft_dir / weights_file}: "
            + "; ".join(
                part
                for part in (
                    f"missing {', '.join(missing[:6])}" if missing else "",
                    f"unexpected {', '.join(unexpected[:6])}" if unexpected else "",
                )
                if part
            )
            + " (a DFlash draft holds fc, hidden_norm, layers.N.*, norm; the embeddings and head are the target's)"
        )
    wrong = [
        f"{n} {list(t.shape)} (config: {list(expected[n].shape)})"
        for n, t in tensors.items()
        if t.shape != expected[n].shape
    ]
    if wrong:
        raise BadInput(
            f"{draft_dir / weights_file}: shapes disagree with config.json: {'; '.join(wrong[:4])}"
        )
    draft.load_state_dict(tensors)
    draft = draft.to(device=target.device, dtype=target.dtype).eval()
    draft.path = str(draft_dir)
    return draft


def check_against_target(config: DFlashConfig, target, where) -> None:
    """What the pair must agree on before any weight loads (the draft shares the target's embeddings
    and head, and reads its layers)."""
    if config.hidden_size != target.hidden_size:
        raise BadInput(
            f"{where}: hidden_size {config.hidden_size}, the target's is {target.hidden_size} (a DFlash draft "
            "shares the target's embeddings and head: they must be equal)"
        )
    deepest = max(config.target_layer_ids)
    if deepest >= target.num_layers:
        raise BadInput(
            f"{where}: dflash_config.target_layer_ids {config.target_layer_ids} names layer {deepest}; the target "
            f"has {target.num_layers} (ids 0..{target.num_layers - 1}, z-lab's: the output of that layer)"
        )
    if config.mask_token_id is None:
        raise BadInput(f"{where}: no dflash_config.mask_token_id: the block's masked slots have no token")
    if config.mask_token_id >= target.vocab_size:
        raise BadInput(
            f"{where}: dflash_config.mask_token_id {config.mask_token_id} is past the target's embedding "
            f"({target.vocab_size} rows): write an id below {target.vocab_size} (the pad or an unused special token)"
        )
