"""Every KV-cache operation of SpecLens lives here (docs/reference.md §7).

transformers renamed the forward argument `past_key_values` to `cache` within 5.x (5.17 still takes
`past_key_values`), and a name a version does not take is swallowed by `**kwargs`: the cache then
silently stays empty. So the argument is chosen from the model's own forward signature, and every
target forward checks that the cache grew by the tokens fed. `DynamicCache.crop` takes a negative
count in 5.x (a positive one raises; in 4.x `crop(0)` emptied the cache), so crop is called only
when something must go.
"""

from __future__ import annotations

import inspect
from functools import cache

import torch
import transformers
from transformers import DynamicCache


def new_target_cache(model) -> DynamicCache:
    """A cache that keeps every position. Built from the model's config, transformers gives
    sliding-window layers (gpt-oss, Gemma) a cache that forgets past the window and then cannot be
    cropped back after a rejected draft; a full cache with the model's own sliding-window masks
    computes the same attention."""
    return DynamicCache()


def new_replay_cache(model):
    """The cache a replay runs on: a `TargetKVCache` driven by the lean forward when the model has
    one that reproduces transformers' own bit for bit (backend/engine/lean_target.py: Llama on the
    CPU), else `new_target_cache`. `target_forward`, `crop_target_cache` and `keep_rows` take either."""
    from backend.engine.lean_target import lean_target

    lean = lean_target(model)
    if lean is None:
        return new_target_cache(model)
    cache = lean.new_cache()
    cache.lean = lean
    return cache


def cache_length(cache: DynamicCache) -> int:
    return int(cache.get_seq_length())


def crop_target_cache(cache: DynamicCache, keep: int) -> None:
    """Drop entries so that `keep` remain. Calls crop only when something must go."""
    remove = cache_length(cache) - keep
    if remove < 0:
        raise ValueError(f"cannot grow a cache by cropping ({cache_length(cache)} -> {keep})")
    if remove:
        cache.crop(-remove)


@cache
def cache_argument(model_class: type) -> str:
    """The forward keyword this transformers version's model takes for the KV cache."""
    parameters = inspect.signature(model_class.forward).parameters
    return "past_key_values" if "past_key_values" in parameters else "cache"


def keep_rows(cache: DynamicCache, start: int, rows: list[int]) -> None:
    """Keep the entries before `start`, then the entries start + r for r in `rows`, in that order:
    after a tree verify, the root and the accepted path stay and every other node goes. Rows that
    already sit where they belong (a chain, or a path down the first branches) only crop."""
    if rows == list(range(len(rows))):
        crop_target_cache(cache, start + len(rows))
        return
    if hasattr(cache, "keep_rows"):  # a TargetKVCache (lean forward)
        cache.keep_rows(start, rows)
        return
    for layer in cache.layers:
        index = torch.tensor(rows, device=layer.keys.device) + start
        layer.keys = torch.cat([layer.keys[..., :start, :], layer.keys.index_select(-2, index)], dim=-2)
        layer.values = torch.cat([layer.values[..., :start, :], layer.values.index_select(-2, index)], dim=-2)


def target_forward(
    model,
    input_ids: torch.Tensor,
    cache: DynamicCache | None,
    start_position: int,
    tree: tuple[torch.Tensor, torch.Tensor] | None = None,
):
    """One forward of the target over `input_ids` [1, T] at positions start..start+T-1.

    Returns the model output (logits [1, T, V]). With a cache, the cache grows by T entries.
    `tree` = (depths [T], visible [T, T] bool: row i sees column j) verifies a draft tree in one
    forward: token i sits at position start + depths[i] and attends to every cached entry and to
    the tree tokens it sees (itself and its ancestors). The mask is additive (0 / dtype min), the
    form both eager and SDPA attention take as a custom 4D mask.
    """
    lean = getattr(cache, "lean", None)
    if lean is not None and lean.model_ref() is model:  # a TargetKVCache: the lean forward (it always grows)
        return lean.forward(input_ids, cache, start_position, tree)
    length = input_ids.shape[1]
    positions = torch.arange(start_position, start_position + length, device=input_ids.device)[None]
    extra = {}
    if tree is not None:
        depths, visible = tree
        positions = (start_position + depths.to(input_ids.device))[None]
        past = cache_length(cache) if cache is not None else 0
        seen = torch.ones(length, past + length, dtype=torch.bool, device=input_ids.device)
        seen[:, past:] = visible.to(input_ids.device)
        dtype = model.get_input_embeddings().weight.dtype
        mask = torch.zeros(seen.shape, dtype=dtype, device=input_ids.device)
        extra["attention_mask"] = mask.masked_fill(~seen, torch.finfo(dtype).min)[None, None]
    if cache is None:
        return _on(
            model(input_ids=input_ids, position_ids=positions, use_cache=False, **extra), input_ids.device
        )
    before = cache_length(cache)
    argument = cache_argument(type(model))
    output = model(input_ids=input_ids, position_ids=positions, use_cache=True, **{argument: cache}, **extra)
    output = _on(output, input_ids.device)
    if cache_length(cache) != before + length:
        raise RuntimeError(
            f"the target's KV cache did not grow by the {length} tokens fed ({before} -> {cache_length(cache)}): "
            f"transformers {transformers.__version__} ignored the '{argument}' argument of "
            f"{type(model).__name__}.forward"
        )
    return output


def _on(output, device: torch.device):
    """Logits where the inputs are: a target split across devices computes them on its last one."""
    if output.logits.device != device:
        output.logits = output.logits.to(device)
    return output


class DraftKVCache:
    """Keys/values of the draft's decoder layers for one sequence; entry i is RoPE position i.

    Buffers grow by doubling, so appending a step copies nothing already stored, and rolling back
    the speculative chain (`crop_to`) only moves the length.
    """

    def __init__(self, num_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self.lengths = [0] * num_layers

    def __len__(self) -> int:
        return self.lengths[0]

    def append(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store [heads, m, head_dim] new entries; return views over every entry of the layer."""
        start, new = self.lengths[layer], keys.shape[-2]
        buffer = self.keys[layer]
        if buffer is None or buffer.shape[-2] < start + new:
            capacity = max(64, 2 * (start + new))
            self.keys[layer] = self._grown(buffer, keys, capacity, start)
            self.values[layer] = self._grown(self.values[layer], values, capacity, start)
        self.keys[layer][..., start : start + new, :] = keys
        self.values[layer][..., start : start + new, :] = values
        self.lengths[layer] = start + new
        return self.keys[layer][..., : start + new, :], self.values[layer][..., : start + new, :]

    @staticmethod
    def _grown(buffer, like: torch.Tensor, capacity: int, keep: int) -> torch.Tensor:
        grown = like.new_empty((*like.shape[:-2], capacity, like.shape[-1]))
        if buffer is not None and keep:
            grown[..., :keep, :] = buffer[..., :keep, :]
        return grown

    def crop_to(self, keep: int) -> None:
        self.lengths = [min(length, keep) for length in self.lengths]
