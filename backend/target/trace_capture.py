"""A trace (trace.py) computed by the target loaded here: the prompt's prefill, then the target's plain
greedy decode one token at a time (what a replay's output must equal), capturing at each position the
states at the HF indices asked and what a greedy verify reads of its logits row. End-of-generation ids
do not stop it: a replay decides where it stops, and its last verify step may draft past an EOS."""

from __future__ import annotations

import torch

from backend.target.target_runner import row_stats
from backend.target.trace import MARGIN, TOP, Trace


@torch.inference_mode()
def capture_traces(target, prompts: list[list[int]], budget: int, indices) -> list[Trace]:
    """The trace of each prompt for replays of at most `budget` new tokens, with the states at HF
    `indices` (`target`: a loaded target, anything with a `runner`, `device` and `dtype`). The prompts
    decode together, one forward of the target per position for all of them (`forward_many`)."""
    runner, device = target.runner, target.device
    indices, count = sorted(set(indices)), budget + MARGIN
    caches = [runner.new_cache() for _ in prompts]
    outputs = runner.forward_many(
        [list(p) for p in prompts], caches, [0] * len(prompts), indices, last_logits=True
    )
    states = [{i: [o.states[i].float().cpu()] for i in indices} for o in outputs]
    rows = [[o.logits[0, -1].float().cpu()] for o in outputs]
    continuations: list[list[int]] = [[] for _ in prompts]
    for step in range(count):
        tokens = [int(r[-1].argmax()) for r in rows]
        for continuation, token in zip(continuations, tokens, strict=True):
            continuation.append(token)
        if step == count - 1:
            break
        starts = [len(p) + step for p in prompts]
        outputs = runner.forward_many([[t] for t in tokens], caches, starts, indices)
        for b, output in enumerate(outputs):
            for i in indices:
                states[b][i].append(output.states[i].float().cpu())
            rows[b].append(output.logits[0, -1].float().cpu())
    source = f"local ({runner.name} forward, {str(target.dtype).removeprefix('torch.')}, {device})"
    return [
        _trace(list(p), c, s, torch.stack(r), budget, source)
        for p, c, s, r in zip(prompts, continuations, states, rows, strict=True)
    ]


def _trace(
    prompt: list[int], continuation: list[int], states: dict, logits: torch.Tensor, budget: int, source: str
) -> Trace:
    """One prompt's trace from its decode: `logits` [len(continuation), V] are the rows of positions
    len(prompt) - 1 onwards (the last position's row, which predicts past the continuation, is never
    read, and its states were not computed)."""
    stats = row_stats(logits)
    top = torch.log_softmax(logits, dim=-1).topk(min(TOP, logits.shape[-1]), dim=-1)
    prompt_rows = len(prompt) - 1  # rows of the prompt's other positions: never read by a replay

    def pad(values: torch.Tensor, fill) -> torch.Tensor:
        return torch.cat([torch.full((prompt_rows, *values.shape[1:]), fill, dtype=values.dtype), values])

    return Trace(
        prompt,
        continuation,
        {i: torch.cat(parts) for i, parts in states.items()},
        pad(top.indices, -1),
        pad(top.values, -torch.inf),
        pad(torch.tensor(stats.entropies), float("nan")),
        pad(torch.tensor(stats.near_tie), False),
        budget,
        source,
    )
