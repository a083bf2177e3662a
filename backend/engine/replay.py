"""Greedy chain speculative decoding (topk = 1, K draft steps), replayed one verify step at a time.

Pending-token convention (docs/reference.md §4): the target cache holds the committed prefix except
the newest token x_n. Each verify step:

  1. draft catch-up: the draft runs over the positions the target just committed, with inputs
     (A_p, x_{p+1}) at RoPE position p, where A_p are the target's fused aux features;
  2. draft chain: from the last catch-up output, K-1 more steps with (out_prev, d_j) at n-1+j;
  3. verify: the target runs [x_n, d_1..d_K] at positions n..n+K; row i predicts the token after n+i;
  4. accept the longest prefix with d_i == argmax(row i-1); the bonus is argmax(row a);
  5. roll back: the target cache keeps x_n, d_1..d_a; the draft cache drops its speculative entries;
  6. commit the a + 1 tokens within the budget (EOS or max_new_tokens ends the replay);
  7. record the step (once, with everything it needs).

Every step emits a + 1 tokens, so the output equals the target's plain greedy output. A greedy chain
step is a `Chain` (chain_step.py): `start` makes one after the prefill; backend/engine/batch.py runs
many samples' steps with one forward of each model per step.

Trees (topk > 1) and sampled acceptance run the same loop with `tree_step`: the draft proposes a
tree (backend/engine/tree.py), the target verifies it in one forward under a tree mask, the
acceptance rule walks it (greedy, or an engine's sampling rule: backend/engine/sampling.py), and
the caches keep the root and the accepted path.
"""

import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from backend.drafts.dflash_config import DFLASH
from backend.engine.chain_step import Chain
from backend.engine.draft_model import Eagle3Draft
from backend.engine.loading import Target
from backend.engine.penalties import History
from backend.engine.sampling import GREEDY, Sampling, exponential_race, inverse_cdf, target_distribution
from backend.engine.step_state import Caches, Cursor, ReplayConfig, elapsed_ms
from backend.engine.tree_step import tree_step
from backend.run.records import PrefillRecord, StepRecord
from backend.run.wiring import Wiring
from backend.target.kv_cache import KVCache
from backend.target.target_runner import TargetOutput

__all__ = ["ReplayConfig", "StepRecord", "output_ids_of", "replay", "start"]


def replay(
    target: Target, draft: Eagle3Draft, prompt_ids: list[int], wiring: Wiring, config: ReplayConfig
) -> Iterator[PrefillRecord | StepRecord]:
    """Yield a PrefillRecord, then one StepRecord per verify step, until EOS or max_new_tokens."""
    generator = None if config.sampling.greedy else torch.Generator().manual_seed(config.sampling.seed)
    if getattr(draft.config, "method", None) == DFLASH and config.topk > 1:
        raise ValueError("a DFlash draft proposes a chain of blocks (topk 1): no tree")
    with torch.inference_mode():
        record, chain = start(target, draft, prompt_ids, wiring, config, generator)
        yield record
        if not config.uses_tree_path:
            while chain.cursor is not None:  # each step commits >= 1 token
                yield chain.step()
            return
        cursor = chain.cursor
        if cursor is None:
            return
        for step_index in range(config.max_new_tokens):  # a tree, or a sampled chain (no penalties)
            record, cursor = tree_step(
                target, draft, wiring, chain.caches, cursor, config, generator, step_index
            )
            yield record
            if cursor is None:
                return


def start(
    target: Target,
    draft: Eagle3Draft,
    prompt_ids: list[int],
    wiring: Wiring,
    config: ReplayConfig,
    generator: torch.Generator | None = None,
) -> tuple[PrefillRecord, Chain]:
    """The prefill: the target over the prompt, the first token, and the sample's state for its verify
    steps (a Chain whose cursor is None when the first token already ends the replay). Call it under
    torch.inference_mode()."""
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    started = time.perf_counter()
    cache = target.runner.new_cache()
    output = target.runner.forward(
        torch.tensor([prompt_ids], device=target.device),
        cache,
        0,
        capture=wiring.aux_hf_indices,
        last_logits=True,
    )
    prefill = Prefill(prompt_ids, cache, output, elapsed_ms(started, target.device))
    return prefilled(target, draft, wiring, config, prefill, generator)


@dataclass
class Prefill:
    """One prompt's prefill forward: the prompt, the cache it filled, its TargetOutput (the last
    position's logits) and its milliseconds (in a batch: this prompt's share of the forward)."""

    prompt_ids: list[int]
    cache: object
    output: TargetOutput
    forward_ms: float


def prefilled(
    target: Target,
    draft: Eagle3Draft,
    wiring: Wiring,
    config: ReplayConfig,
    prefill: Prefill,
    generator: torch.Generator | None = None,
) -> tuple[PrefillRecord, Chain]:
    """`start` after its forward (the batched replay runs many prompts' in one): the first token,
    the record and the Chain."""
    prompt_ids, output = prefill.prompt_ids, prefill.output
    started = time.perf_counter()
    device, indices = target.device, wiring.aux_hf_indices
    eos = config.stops(target.eos_token_ids)
    history = None
    last = output.logits[0, -1]
    if config.penalties.active:
        history = History(list(prompt_ids), last.shape[-1], last.device)
        last = history.apply(last[None], config.penalties)[0]
    over_trace = getattr(target.runner, "name", None) == "trace"  # the trace's greedy path: no draw
    first = first_token(last, GREEDY if over_trace else config.sampling, generator)
    if history is not None:
        history.add([first])
    features = output.features(indices)
    record = PrefillRecord(
        list(prompt_ids),
        first,
        prefill.forward_ms + elapsed_ms(started, device),
        features.to("cpu") if config.record else None,
    )
    caches = Caches(prefill.cache, KVCache(draft.config.num_layers))
    cursor = Cursor(len(prompt_ids), first, 1, features, list(prompt_ids[1:]) + [first], 0)
    if first in eos or config.max_new_tokens <= 1:
        cursor = None
    return record, chain_of(draft)(target, draft, wiring, config, caches, cursor, history)


def chain_of(draft) -> type[Chain]:
    """The chain a draft's method steps with: EAGLE-3's (chain_step.Chain) or DFlash's blocks."""
    from backend.engine.dflash_step import DFlashChain

    return DFlashChain if getattr(draft.config, "method", None) == DFLASH else Chain


def first_token(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None) -> int:
    """The token after the prompt: the argmax, or a draw from the target's distribution (SGLang's
    sampler by inverse CDF with one coin; vLLM's by an exponential race)."""
    if sampling.greedy or sampling.top_k == 1:
        return int(logits.argmax())
    probs = target_distribution(logits[None], sampling)[0].cpu()
    if sampling.rule == "vllm":
        return exponential_race(probs, generator)
    return inverse_cdf(probs, float(torch.rand(1, generator=generator, dtype=torch.float32)))


def output_ids_of(records: list[PrefillRecord | StepRecord]) -> list[int]:
    """The generated ids after the prompt: the prefill's greedy token, then each step's committed ids."""
    output: list[int] = []
    for record in records:
        output.extend([record.first_token] if isinstance(record, PrefillRecord) else record.committed_ids)
    return output
