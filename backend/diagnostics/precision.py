"""Does the target agree with itself in this dtype? The yardstick for bf16 replays (docs/reference.md §7).

A replay reads the target's argmax from (K+1)-token verify forwards; plain greedy decoding reads it
from 1-token forwards. In fp32 on a CPU both give the same argmax. In bf16 the two shapes of matrix
product round differently, so where the top two logits nearly tie the argmax can flip, and a replay
that is exact as an algorithm still diverges from `generate`. That is not a SpecLens bug when the
target itself, fed the same prefix, gives one token as a verify chunk and another as 1-token decodes.

`self_disagreement` measures how often that happens along a token sequence (per 1,000 tokens), and
`divergence_explained` checks one replay divergence: it is accepted only where the target disagrees
with itself there.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.engine.loading import Target
from backend.plain import Plain

DEFINITION = (
    "target self-disagreement: share of positions where the argmax of a (K+1)-token verify forward "
    "differs from the argmax of 1-token decode forwards over the same prefix and tokens, per 1,000 "
    "positions, in the run's dtype"
)


@dataclass
class SelfDisagreement(Plain):
    DERIVED = ("per_1000", "definition")

    positions: int  # positions compared
    disagreeing: list[int]  # absolute positions whose two argmaxes differ
    width: int  # verify chunk width K+1
    dtype: str
    device: str

    @property
    def per_1000(self) -> float:
        return 1000.0 * len(self.disagreeing) / self.positions if self.positions else 0.0

    @property
    def definition(self) -> str:
        return DEFINITION


def _chunk_and_decode(
    target: Target, cache, start: int, chunk: list[int], decoded: int | None = None
) -> tuple[list[int], list[int]]:
    """From a cache holding exactly `start` positions: the argmax rows of `chunk` fed as one forward,
    and of its first `decoded` tokens (default all) fed one at a time. The cache ends holding the
    1-token path."""
    device, runner = target.device, target.runner
    batched = runner.forward(torch.tensor([chunk], device=device), cache, start).logits[0]
    batched_argmax = batched.argmax(-1).tolist()
    cache.crop(start)
    sequential_argmax = []
    for offset, token in enumerate(chunk[:decoded]):
        logits = runner.forward(torch.tensor([[token]], device=device), cache, start + offset).logits
        sequential_argmax.append(int(logits[0, -1].argmax()))
    return batched_argmax, sequential_argmax


def self_disagreement(
    target: Target, prompt_ids: list[int], continuation: list[int], num_steps: int
) -> SelfDisagreement:
    """Walk `continuation` after `prompt_ids` in verify-sized chunks (K+1 tokens) and compare, at every
    position, the verify argmax with the 1-token decode argmax."""
    width = num_steps + 1
    disagreeing, compared = [], 0
    with torch.inference_mode():
        cache = target.runner.new_cache()
        target.runner.forward(torch.tensor([prompt_ids], device=target.device), cache, 0)
        position = len(prompt_ids)
        for first in range(0, len(continuation), width):
            chunk = continuation[first : first + width]
            batched, sequential = _chunk_and_decode(target, cache, position, chunk)
            disagreeing += [
                position + row for row, (a, b) in enumerate(zip(batched, sequential, strict=True)) if a != b
            ]
            compared += len(chunk)
            position += len(chunk)
    return SelfDisagreement(
        compared, disagreeing, width, str(target.dtype).replace("torch.", ""), str(target.device)
    )


def divergence_explained(target: Target, prompt_ids: list[int], steps: list, output_index: int) -> dict:
    """Is a replay token that differs from `generate` the target's own rounding?

    Recomputes, with target forwards only, both histories up to output token `output_index` (>= 1):
    the 1-token decode path `generate` takes (prefill, then one token at a time) and the path the
    replay took (prefill, then each recorded verify chunk [x_n, d_1..d_K], cropped to what it
    accepted). The draft plays no part. Where the two argmaxes differ the divergence is the target's
    batch-vs-sequential rounding (explained); where they agree, the replay itself is wrong there.
    """
    device, runner = target.device, target.runner
    position = len(prompt_ids) + output_index  # absolute position of the diverging token
    step = next(s for s in steps if s.position < position <= s.position + len(s.committed_ids))
    sequence = list(prompt_ids) + [steps[0].pending_token] + [t for s in steps for t in s.committed_ids]
    with torch.inference_mode():
        cache = runner.new_cache()
        logits = runner.forward(torch.tensor([prompt_ids], device=device), cache, 0).logits
        decode_argmax = int(logits[0, -1].argmax())
        for at in range(len(prompt_ids), position):
            ids = torch.tensor([[sequence[at]]], device=device)
            decode_argmax = int(runner.forward(ids, cache, at).logits[0, -1].argmax())

        cache = runner.new_cache()
        runner.forward(torch.tensor([prompt_ids], device=device), cache, 0)
        for earlier in steps:
            chunk = torch.tensor([[earlier.pending_token] + earlier.drafted_ids], device=device)
            rows = runner.forward(chunk, cache, earlier.position).logits[0]
            if earlier is step:
                verify_argmax = int(rows[position - 1 - earlier.position].argmax())
                break
            cache.crop(earlier.position + earlier.accepted_count + 1)
    return {
        "verify_argmax": verify_argmax,
        "decode_argmax": decode_argmax,
        "explained": verify_argmax != decode_argmax,
    }
