"""KV caches: one protocol (length, crop, keep_rows; append where SpecLens's forwards write), the
draft's growing buffers and rollback; the target's cache grows by what is fed."""

from __future__ import annotations

import pytest


def test_draft_cache_appends_views_and_crops():
    import torch

    from backend.target.kv_cache import KVCache

    cache = KVCache(num_layers=2)
    keys = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)
    all_keys, all_values = cache.append(0, keys, -keys)
    assert torch.equal(all_keys, keys) and torch.equal(all_values, -keys) and cache.length == 3
    more = torch.ones(2, 70, 4)  # past the first buffer's capacity: it grows, keeping what was stored
    all_keys, _ = cache.append(0, more, more)
    assert all_keys.shape == (2, 73, 4) and torch.equal(all_keys[:, :3], keys)
    cache.crop(2)
    all_keys, _ = cache.append(0, more[:, :1], more[:, :1])
    assert all_keys.shape == (2, 3, 4) and torch.equal(all_keys[:, :2], keys[:, :2])


def test_target_cache_grows_by_the_tokens_fed_and_crops(pairs):
    import torch

    from backend.target.lean_target import LeanTarget
    from backend.target.target_runner import TransformersRunner

    model = pairs["random-L2"].target.model
    for runner in (TransformersRunner(model), LeanTarget(model)):
        cache = runner.new_cache()
        with torch.inference_mode():
            cached = runner.forward(torch.tensor([[1, 2, 3]]), cache, 0)
            assert cache.length == 3
            runner.forward(torch.tensor([[4, 5]]), cache, 3)
            assert cache.length == 5
            cache.crop(4)
            assert cache.length == 4
            cache.crop(4)  # nothing to drop
            assert cache.length == 4
            with pytest.raises(ValueError, match="cannot grow"):
                cache.crop(6)
            plain = model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=False)
        assert torch.allclose(cached.logits, plain.logits, atol=1e-6)


def test_the_cache_argument_follows_the_models_own_signature():
    from backend.target.kv_cache import cache_argument

    class OldStyle:  # transformers up to at least 5.17
        def forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs): ...

    class NewStyle:  # newer 5.x releases
        def forward(self, input_ids=None, cache=None, use_cache=None, **kwargs): ...

    assert cache_argument(OldStyle) == "past_key_values"
    assert cache_argument(NewStyle) == "cache"


def test_a_forward_that_swallows_the_cache_is_an_error_not_an_empty_cache(pairs):
    """A model whose forward takes the cache under a name we do not pass (here: it drops it) leaves
    the cache empty; the forward must say so instead of replaying from nothing."""
    import torch

    from backend.target.target_runner import TransformersRunner

    real = pairs["random-L2"].target.model

    class Swallowing(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = real

        def forward(self, input_ids=None, position_ids=None, use_cache=None, **kwargs):
            return self.inner(input_ids=input_ids, position_ids=position_ids, use_cache=False)

    runner = TransformersRunner(Swallowing())
    with torch.inference_mode(), pytest.raises(RuntimeError, match="did not grow by the 3 tokens"):
        runner.forward(torch.tensor([[1, 2, 3]]), runner.new_cache(), 0)
