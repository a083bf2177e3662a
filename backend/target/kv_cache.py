"""The KV caches of SpecLens: one protocol, three kinds of entries (docs/reference.md §7).

Every cache object updates itself and is asked nothing about its kind: each has `length` (entries
held); the replay's caches (`KVCache`, `HFCache`) also `crop(keep)` (keep the first `keep` entries)
and `keep_rows(start, rows)` (after a tree verify: keep the entries before `start`, then start + r for
r in `rows`); the teacher's `TTTCache` only grows. The forward that feeds a cache appends to
it: `KVCache.append` for the lean target forward (backend/target/lean_target.py) and the draft
(backend/engine/draft_model.py), `TTTCache.append` for the teacher-forced TTT layout, and transformers
itself (`DynamicCache.update`) for `HFCache`, the cache of transformers' own forward
(backend/target/target_runner.py).

transformers renamed the forward argument `past_key_values` to `cache` within 5.x (5.17 still takes
`past_key_values`), and a name a version does not take is swallowed by `**kwargs`: the cache then
silently stays empty. So the argument is chosen from the model's own forward signature
(`cache_argument`), and the transformers runner checks that the cache grew by the tokens fed.
`DynamicCache.crop` takes a negative count in 5.x (a positive one raises; in 4.x `crop(0)` emptied the
cache), so `HFCache.crop` calls it only when something must go.
"""

from __future__ import annotations

import inspect
from functools import cache

import torch
from transformers import DynamicCache


def _check_crop(length: int, keep: int) -> None:
    if keep > length:
        raise ValueError(f"cannot grow a cache by cropping ({length} -> {keep})")


class KVCache:
    """Keys/values of a model's layers for one sequence, in buffers with room to grow (a quarter
    more, at least 64 entries): entry i is RoPE position i of the committed sequence (tree verifies
    keep the root and the accepted path). `append` writes only the new entries and returns views
    over every entry of the layer; `crop` only moves the length. Entries are [..., T, head_dim]
    ([1, heads, T, d] for the target, [heads, m, d] for the draft)."""

    def __init__(self, num_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self.lengths = [0] * num_layers

    @property
    def length(self) -> int:
        return self.lengths[0]

    def append(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new entries of `layer`; return views over every entry of the layer."""
        start = self.lengths[layer]
        end = start + keys.shape[-2]
        buffer = self.keys[layer]
        if buffer is None or buffer.shape[-2] < end:
            capacity = max(end + 64, end + end // 4)  # room to grow, never twice the cache
            self.keys[layer] = self._grown(buffer, keys, capacity, start)
            self.values[layer] = self._grown(self.values[layer], values, capacity, start)
        key_buffer, value_buffer = self.keys[layer], self.values[layer]
        key_buffer[..., start:end, :] = keys
        value_buffer[..., start:end, :] = values
        self.lengths[layer] = end
        return key_buffer[..., :end, :], value_buffer[..., :end, :]

    @staticmethod
    def _grown(buffer: torch.Tensor | None, like: torch.Tensor, capacity: int, keep: int) -> torch.Tensor:
        grown = like.new_empty((*like.shape[:-2], capacity, like.shape[-1]))
        if buffer is not None and keep:
            grown[..., :keep, :] = buffer[..., :keep, :]
        return grown

    def crop(self, keep: int) -> None:
        _check_crop(self.length, keep)
        self.lengths = [keep] * len(self.lengths)

    def keep_rows(self, start: int, rows: list[int]) -> None:
        """Keep the entries before `start`, then start + r for r in `rows`, in that order. Rows that
        already sit where they belong (a chain, or a path down the first branches) only crop."""
        if rows != list(range(len(rows))):
            for layer, keys in enumerate(self.keys):
                if keys is None:
                    continue
                index = torch.tensor(rows, device=keys.device) + start
                end = start + len(rows)
                keys[..., start:end, :] = keys.index_select(-2, index)
                values = self.values[layer]
                values[..., start:end, :] = values.index_select(-2, index)
        self.crop(start + len(rows))


class TTTCache:
    """The draft's keys/values in the teacher-forced TTT layout (backend/engine/teacher.py): one block
    of m entries per TTT step, attention over every block (the mask decides what each index sees).
    Blocks are concatenated, never written in place, so training (demo/train_draft.py) can
    backpropagate through them; a TTT cache is only ever appended to."""

    def __init__(self, num_layers: int):
        self.blocks: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(num_layers)]

    @property
    def length(self) -> int:
        return sum(keys.shape[-2] for keys, _ in self.blocks[0])

    def append(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        blocks = self.blocks[layer]
        blocks.append((keys, values))
        if len(blocks) == 1:
            return keys, values
        return torch.cat([k for k, _ in blocks], dim=-2), torch.cat([v for _, v in blocks], dim=-2)


class HFCache:
    """transformers' own `DynamicCache` behind the same protocol; transformers' forward appends to
    `inner` (backend/target/target_runner.py `TransformersRunner`).

    A cache that keeps every position: built from the model's config, transformers gives
    sliding-window layers (gpt-oss, Gemma) a cache that forgets past the window and then cannot be
    cropped back after a rejected draft; a full cache with the model's own sliding-window masks
    computes the same attention."""

    def __init__(self):
        self.inner = DynamicCache()

    @property
    def length(self) -> int:
        return int(self.inner.get_seq_length())

    def crop(self, keep: int) -> None:
        length = self.length
        _check_crop(length, keep)
        if keep < length:
            self.inner.crop(keep - length)

    def keep_rows(self, start: int, rows: list[int]) -> None:
        if rows == list(range(len(rows))):
            self.crop(start + len(rows))
            return
        for layer in self.inner.layers:
            index = torch.tensor(rows, device=layer.keys.device) + start
            layer.keys = torch.cat([layer.keys[..., :start, :], layer.keys.index_select(-2, index)], dim=-2)
            layer.values = torch.cat(
                [layer.values[..., :start, :], layer.values.index_select(-2, index)], dim=-2
            )


@cache
def forward_takes(model_class: type, name: str) -> bool:
    """Whether this transformers version's model forward takes the keyword `name` (a name it does
    not take is swallowed by `**kwargs`)."""
    return name in inspect.signature(model_class.forward).parameters


def cache_argument(model_class: type) -> str:
    """The forward keyword this transformers version's model takes for the KV cache."""
    return "past_key_values" if forward_takes(model_class, "past_key_values") else "cache"
