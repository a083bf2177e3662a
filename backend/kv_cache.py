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

    The draft's speculative chain appends entries that verification may reject; `crop_to` drops them.
    """

    def __init__(self, num_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    def __len__(self) -> int:
        first = self.keys[0]
        return 0 if first is None else int(first.shape[-2])

    def past(self, layer: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        if self.keys[layer] is None:
            return None
        return self.keys[layer], self.values[layer]

    def append(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        if self.keys[layer] is None:
            self.keys[layer], self.values[layer] = keys, values
        else:
            self.keys[layer] = torch.cat([self.keys[layer], keys], dim=-2)
            self.values[layer] = torch.cat([self.values[layer], values], dim=-2)

    def crop_to(self, keep: int) -> None:
        for layer, keys in enumerate(self.keys):
            if keys is not None and keys.shape[-2] > keep:
                self.keys[layer] = keys[..., :keep, :]
                self.values[layer] = self.values[layer][..., :keep, :]
