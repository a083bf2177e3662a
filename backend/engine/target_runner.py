"""The target's forward behind one small interface, chosen once when the target is loaded.

A runner is a `TargetRunner` (below): a `name` ("lean" or "transformers"), `new_cache()`,
`forward(input_ids, cache, start_position, tree=None, capture=())` and its batched form
`forward_rows(input_ids, caches, starts, capture=())` (B sequences, one cache each), written once on
the base class, which works out the positions and hands the subclass's `run` (`run_rows`) what it
needs.

Two runners implement it:
- `LeanTarget` (backend/engine/lean_target.py): transformers' Llama arithmetic without its per-call
  machinery, on a `KVCache`; taken only where it reproduced transformers' own forward bit for bit
  when the model was loaded;
- `TransformersRunner` (below): the model's own forward on an `HFCache`, capturing with forward hooks.

`backend.engine.lean_target.target_runner(model)` picks one when a `backend.engine.loading.Target` is
built; the Target holds it as `runner`, and every forward of a replay goes through it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import transformers

from backend.engine.capture import AuxCapture, fused
from backend.engine.kv_cache import HFCache, cache_argument


@dataclass
class TargetOutput:
    logits: torch.Tensor  # [1, T, V], on the device of the inputs
    states: dict[int, torch.Tensor]  # HF index -> [T, Ht], the pre-norm residual stream

    def features(self, aux_hf_indices) -> torch.Tensor:
        """The draft's fused input [T, 3*Ht] from the states in wiring order (capture.fused)."""
        return fused([self.states[i] for i in aux_hf_indices])


def tree_mask(tree: tuple[torch.Tensor, torch.Tensor], past: int, dtype: torch.dtype, device) -> torch.Tensor:
    """The additive [1, 1, T, past + T] mask of a tree verify (0 / dtype min): every node sees every
    cached entry and the tree tokens it sees (itself and its ancestors). Both eager and SDPA attention
    take this form as a custom 4D mask."""
    _, visible = tree
    length = visible.shape[0]
    seen = torch.ones(length, past + length, dtype=torch.bool, device=device)
    seen[:, past:] = visible.to(device)
    mask = torch.zeros(seen.shape, dtype=dtype, device=device)
    return mask.masked_fill(~seen, torch.finfo(dtype).min)[None, None]


def positions_of(length: int, start: int, tree, device) -> torch.Tensor:
    if tree is None:
        return torch.arange(start, start + length, device=device)[None]
    return (start + tree[0].to(device))[None]


class TargetRunner:
    """The interface every replay's target forward goes through; subclasses implement `run`."""

    name = "?"

    def new_cache(self):
        raise NotImplementedError

    def forward(
        self,
        input_ids: torch.Tensor,
        cache,
        start_position: int,
        tree: tuple[torch.Tensor, torch.Tensor] | None = None,
        capture=(),
    ) -> TargetOutput:
        """Run the target over `input_ids` [1, T] at positions start..start+T-1 (a tree: start +
        depths, (depths, visible) as backend/engine/tree.py builds them, each token seeing the cache
        and its ancestors), appending T entries to `cache` (one of `new_cache()`); the logits
        [1, T, V] and the residual-stream states at the HF indices in `capture`: index 0 the hidden
        entering layer 0, index i the output of layer i - 1."""
        positions = positions_of(input_ids.shape[1], start_position, tree, input_ids.device)
        return self.run(input_ids, cache, positions, tree, frozenset(capture))

    def run(self, input_ids, cache, positions, tree, wanted: frozenset[int]) -> TargetOutput:
        raise NotImplementedError

    def forward_rows(
        self, input_ids: torch.Tensor, caches: list, starts: list[int], capture=()
    ) -> list[TargetOutput]:
        """`forward` over B sequences of the same length (input_ids [B, T]), sequence b at positions
        starts[b].. on caches[b]: one TargetOutput each (logits [1, T, V]). The batched replay
        (backend/engine/batch.py) verifies a batch of samples with it."""
        length, device = input_ids.shape[1], input_ids.device
        positions = torch.cat([positions_of(length, start, None, device) for start in starts])
        return self.run_rows(input_ids, caches, positions, None, frozenset(capture))

    def run_rows(
        self, input_ids, caches: list, positions, tree, wanted: frozenset[int]
    ) -> list[TargetOutput]:
        """One `run` per sequence; a runner that can batch the sequences overrides it (LeanTarget)."""
        return [
            self.run(input_ids[row : row + 1], cache, positions[row : row + 1], tree, wanted)
            for row, cache in enumerate(caches)
        ]


class TransformersRunner(TargetRunner):
    """The model's own forward (any family, any device, a target split by accelerate)."""

    name = "transformers"

    def __init__(self, model):
        self.model = model

    def new_cache(self) -> HFCache:
        return HFCache()

    def run(self, input_ids, cache: HFCache, positions, tree, wanted) -> TargetOutput:
        model, device = self.model, input_ids.device
        length = input_ids.shape[1]
        before = cache.length
        extra = {}
        if tree is not None:
            dtype = model.get_input_embeddings().weight.dtype
            extra["attention_mask"] = tree_mask(tree, before, dtype, device)
        argument = cache_argument(type(model))
        with AuxCapture(model, wanted) if wanted else contextlib.nullcontext() as hooks:  # no hooks unasked
            output = model(
                input_ids=input_ids,
                position_ids=positions,
                use_cache=True,
                **{argument: cache.inner},
                **extra,
            )
            states = {i: hooks.captured[i][0] for i in wanted}
        if cache.length != before + length:
            raise RuntimeError(
                f"the target's KV cache did not grow by the {length} tokens fed ({before} -> {cache.length}): "
                f"transformers {transformers.__version__} ignored the '{argument}' argument of "
                f"{type(model).__name__}.forward"
            )
        return TargetOutput(
            output.logits.to(device), states
        )  # a split target computes them on its last device
