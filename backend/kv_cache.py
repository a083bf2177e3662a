"""Every KV-cache operation of SpecLens lives here.

transformers 5.x renamed the forward argument `past_key_values` to `cache`, and `DynamicCache.crop`
now takes a negative count (a positive one raises; in 4.x `crop(0)` emptied the cache). Keeping the
target cache behind these few functions means a future API change is fixed in one file.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


def new_target_cache(model) -> DynamicCache:
    return DynamicCache(config=model.config)


def cache_length(cache: DynamicCache) -> int:
    return int(cache.get_seq_length())


def crop_target_cache(cache: DynamicCache, keep: int) -> None:
    """Drop entries so that `keep` remain. Calls crop only when something must go."""
    remove = cache_length(cache) - keep
    if remove < 0:
        raise ValueError(f"cannot grow a cache by cropping ({cache_length(cache)} -> {keep})")
    if remove:
        cache.crop(-remove)


def target_forward(model, input_ids: torch.Tensor, cache: DynamicCache | None, start_position: int):
    """One forward of the target over `input_ids` [1, T] at positions start..start+T-1.

    Returns the model output (logits [1, T, V]). With a cache, the cache grows by T entries.
    """
    length = input_ids.shape[1]
    positions = torch.arange(start_position, start_position + length, device=input_ids.device)[None]
    return model(input_ids=input_ids, position_ids=positions, cache=cache, use_cache=cache is not None)


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

    def append(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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
