"""The target's forward behind one small interface, chosen once when the target is loaded.

A runner is a `TargetRunner` (below): a `name` ("lean" or "transformers"), `new_cache()`,
`forward(input_ids, cache, start_position, tree=None, capture=(), last_logits=False)` and its batched
form `forward_many(sequences, caches, starts, capture=(), last_logits=False)` (B sequences of any
lengths, one cache each), written once on the base class, which works out the positions and hands
the subclass's `run` (`run_many`) what it needs. `last_logits`: only the last position's logits are
computed (a prefill reads nothing else; transformers' `generate()` computes its prefill the same way,
with `logits_to_keep=1`).

Two runners implement it:
- `LeanTarget` (backend/target/lean_target.py): transformers' Llama arithmetic without its per-call
  machinery, on a `KVCache`; taken only where it agreed with transformers' own forward when the model
  was loaded (a decode bit for bit, several rows within the last places: backend/target/product.py);
- `TransformersRunner` (below): the model's own forward on an `HFCache`, capturing with forward hooks.

`backend.target.lean_target.target_runner(model)` picks one when a `backend.engine.loading.Target` is
built; the Target holds it as `runner`, and every forward of a replay goes through it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import transformers

from backend.run.metrics import NEAR_TIE
from backend.target.capture import AuxCapture, fused
from backend.target.kv_cache import HFCache, cache_argument, forward_takes


@dataclass(frozen=True)
class RowStats:
    """What a greedy verify reads of each row of the target's logits: its argmax, the argmax's
    probability, the entropy (nats) and whether its top two logits are a near-tie (docs/reference.md
    §7: a product summed in another order may take the other token there)."""

    argmax: list[int]
    top_probs: list[float]
    entropies: list[float]
    near_tie: list[bool]


def row_stats(logits: torch.Tensor) -> RowStats:
    """The RowStats of [R, V] logits."""
    rows = logits.float()
    probs = torch.softmax(rows, dim=-1)
    entropies = -(probs * probs.clamp_min(1e-30).log()).sum(-1)
    tie = near_ties(rows)
    return RowStats(rows.argmax(-1).tolist(), probs.max(-1).values.tolist(), entropies.tolist(), tie.tolist())


def near_ties(logits: torch.Tensor) -> torch.Tensor:
    """[R] bool: the rows of [R, V] logits whose top two lie within NEAR_TIE of the row's largest
    magnitude."""
    rows = logits.float()
    if rows.shape[-1] < 2:
        return torch.zeros(rows.shape[0], dtype=torch.bool, device=rows.device)
    top = rows.topk(2, dim=-1).values
    return top[:, 0] - top[:, 1] <= NEAR_TIE * rows.abs().amax(-1).clamp_min(1.0)


@dataclass
class TargetOutput:
    logits: torch.Tensor  # [1, T, V], on the device of the inputs
    states: dict[int, torch.Tensor]  # HF index -> [T, Ht], the pre-norm residual stream
    # per row, whether a target computed it (None: all): a tree answered from a trace (trace.py)
    # holds only the rows of nodes on the target's own continuation
    known: list[bool] | None = None

    def features(self, aux_hf_indices) -> torch.Tensor:
        """The draft's fused input [T, 3*Ht] from the states in wiring order (capture.fused)."""
        return fused([self.states[i] for i in aux_hf_indices])

    def stats(self) -> RowStats:
        """What a greedy verify reads of each row (a trace's output holds them without the logits)."""
        return row_stats(self.logits[0])


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

    @property
    def described(self) -> str:
        """Whose arithmetic answers the forward, as a run records it."""
        return self.name

    def new_cache(self):
        raise NotImplementedError

    def forward(
        self,
        input_ids: torch.Tensor,
        cache,
        start_position: int,
        tree: tuple[torch.Tensor, torch.Tensor] | None = None,
        capture=(),
        last_logits: bool = False,
    ) -> TargetOutput:
        """Run the target over `input_ids` [1, T] at positions start..start+T-1 (a tree: start +
        depths, (depths, visible) as backend/engine/tree.py builds them, each token seeing the cache
        and its ancestors), appending T entries to `cache` (one of `new_cache()`); the logits
        [1, T, V] ([1, 1, V], the last position's, with `last_logits`) and the residual-stream states
        at the HF indices in `capture`: index 0 the hidden entering layer 0, index i the output of
        layer i - 1."""
        positions = positions_of(input_ids.shape[1], start_position, tree, input_ids.device)
        return self.run(input_ids, cache, positions, tree, frozenset(capture), last_logits)

    def run(
        self, input_ids, cache, positions, tree, wanted: frozenset[int], last_logits: bool
    ) -> TargetOutput:
        raise NotImplementedError

    def forward_many(
        self,
        sequences: list[list[int]],
        caches: list,
        starts: list[int],
        capture=(),
        last_logits: bool = False,
    ) -> list[TargetOutput]:
        """`forward` over B sequences of any lengths at once, sequence b (its token ids) at positions
        starts[b].. on caches[b]: one TargetOutput each, as its own `forward` would give. The batched
        replay (backend/engine/batch.py) runs its prefills and verify steps through it."""
        device = self.device
        ids = torch.tensor([[token for sequence in sequences for token in sequence]], device=device)
        positions = torch.cat(
            [positions_of(len(s), start, None, device) for s, start in zip(sequences, starts, strict=True)],
            dim=1,
        )
        lengths = [len(sequence) for sequence in sequences]
        return self.run_many(ids, caches, positions, lengths, frozenset(capture), last_logits)

    def run_many(
        self,
        input_ids,
        caches: list,
        positions,
        lengths: list[int],
        wanted: frozenset[int],
        last_logits: bool,
    ) -> list[TargetOutput]:
        """The sequences packed one after another in input_ids and positions [1, sum(lengths)]: one
        `run` per sequence; a runner that can batch them overrides it (LeanTarget)."""
        outputs, offset = [], 0
        for length, sequence_cache in zip(lengths, caches, strict=True):
            end = offset + length
            ids, at = input_ids[:, offset:end], positions[:, offset:end]
            outputs.append(self.run(ids, sequence_cache, at, None, wanted, last_logits))
            offset = end
        return outputs

    @property
    def device(self) -> torch.device:
        raise NotImplementedError


class TransformersRunner(TargetRunner):
    """The model's own forward (any family, any device, a target split by accelerate)."""

    name = "transformers"

    def __init__(self, model):
        self.model = model

    def new_cache(self) -> HFCache:
        return HFCache()

    @property
    def device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    def run(self, input_ids, cache: HFCache, positions, tree, wanted, last_logits) -> TargetOutput:
        model, device = self.model, input_ids.device
        length = input_ids.shape[1]
        before = cache.length
        extra = {}
        if last_logits and forward_takes(type(model), "logits_to_keep"):  # as generate() passes it
            extra["logits_to_keep"] = 1
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
        logits = output.logits[:, -1:] if last_logits else output.logits
        return TargetOutput(logits.to(device), states)  # a split target computes them on its last device
