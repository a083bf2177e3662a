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


def target_forward(model, input_ids: torch.Tensor, cache: DynamicCache | None, start_position: int):
    """One forward of the target over `input_ids` [1, T] at positions start..start+T-1.

    Returns the model output (logits [1, T, V]). With a cache, the cache grows by T entries.
    """
    length = input_ids.shape[1]
    positions = torch.arange(start_position, start_position + length, device=input_ids.device)[None]
    if cache is None:
        return model(input_ids=input_ids, position_ids=positions, use_cache=False)
    before = cache_length(cache)
    argument = cache_argument(type(model))
    output = model(input_ids=input_ids, position_ids=positions, use_cache=True, **{argument: cache})
    if cache_length(cache) != before + length:
        raise RuntimeError(
            f"the target's KV cache did not grow by the {length} tokens fed ({before} -> {cache_length(cache)}): "
            f"transformers {transformers.__version__} ignored the '{argument}' argument of "
            f"{type(model).__name__}.forward"
        )
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
