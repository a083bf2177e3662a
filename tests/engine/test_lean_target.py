"""The lean forwards (backend/engine/lean_target.py, Eagle3Draft's lean path): the same numbers as
transformers' forward and as the draft's modules, bit for bit, and only where that is checked."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def default_environment(monkeypatch):
    """The lean target forward is the default (SPECLENS_LEAN_TARGET unset); these tests exercise it."""
    monkeypatch.delenv("SPECLENS_LEAN_TARGET", raising=False)


def test_the_lean_target_forward_is_on_unless_turned_off(pairs, monkeypatch):
    from backend.engine.kv_cache import new_replay_cache, new_target_cache
    from backend.engine.lean_target import TargetKVCache, lean_target

    model = pairs["random-L2"].target.model
    assert lean_target(model) is not None and isinstance(new_replay_cache(model), TargetKVCache)
    monkeypatch.setenv("SPECLENS_LEAN_TARGET", "0")
    assert lean_target(model) is None
    assert type(new_replay_cache(model)) is type(new_target_cache(model))  # transformers' own forward


def _forced_module_path(module):
    """A no-op forward hook: the lean paths step aside for any hook that is not SpecLens's."""
    return module.register_forward_hook(lambda *_: None)


def test_the_lean_forward_reproduces_transformers_bit_for_bit(pairs):
    """Prefill, verify chunks, crops, a tree, keep_rows, one-token steps and a context past the
    cache's first buffer: logits and every captured layer equal, and the caches stay as long."""
    import torch

    from backend.engine.capture import AuxCapture
    from backend.engine.kv_cache import (
        cache_length,
        crop_target_cache,
        keep_rows,
        new_replay_cache,
        new_target_cache,
        target_forward,
    )
    from backend.engine.lean_target import TargetKVCache

    model = pairs["random-L6-eagle"].target.model
    layers = range(model.config.num_hidden_layers + 1)
    ids = torch.randint(0, model.config.vocab_size, (1, 160), generator=torch.Generator().manual_seed(3))
    depths = torch.tensor([0, 1, 1, 2, 2])
    visible = torch.tensor(
        [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]],
        dtype=torch.bool,
    )
    with torch.inference_mode(), AuxCapture(model, layers) as capture:
        lean = new_replay_cache(model)
        assert isinstance(lean, TargetKVCache)
        reference = new_target_cache(model)

        def both(chunk, start, tree=None):
            expected = target_forward(model, chunk, reference, start, tree).logits
            states = [capture.captured[i].clone() for i in layers]
            got = target_forward(model, chunk, lean, start, tree).logits
            assert torch.equal(expected, got)
            assert all(torch.equal(states[i], capture.captured[i]) for i in layers)
            assert cache_length(lean) == cache_length(reference)

        both(ids[:, :7], 0)
        position = 7
        while position < 150:  # verify chunks of 5, then keep 3 (a rejection), past 64 entries
            both(ids[:, position : position + 5], position)
            crop_target_cache(reference, position + 3)
            crop_target_cache(lean, position + 3)
            position += 3
        both(ids[:, position : position + 1], position)  # a one-token step
        position += 1
        both(ids[:, position : position + 5], position, (depths, visible))  # a tree
        for cache in (reference, lean):
            keep_rows(cache, position, [0, 2, 4])  # the root and the path down the second branch
        both(ids[:, 150:155], position + 3)


def test_a_replay_takes_the_lean_path_and_records_the_same_steps(pairs):
    """The whole replay (chain and tree, recorded) on the lean forwards equals the replay on
    transformers' forward and the draft's modules, record for record and tensor for tensor."""
    import torch

    from backend.engine.replay import ReplayConfig, replay

    pair = pairs["copy-L5-context"]
    for config in (ReplayConfig(3, 40), ReplayConfig(3, 30, topk=2, num_draft_tokens=5)):
        lean = list(replay(pair.target, pair.draft, [1, 5, 9, 3], pair.wiring, config))
        hooks = [_forced_module_path(pair.target.model), _forced_module_path(pair.draft.layers[0])]
        try:
            plain = list(replay(pair.target, pair.draft, [1, 5, 9, 3], pair.wiring, config))
        finally:
            for hook in hooks:
                hook.remove()
        assert len(lean) == len(plain)
        for a, b in zip(lean, plain, strict=True):
            for name in a.__dataclass_fields__:
                x, y = getattr(a, name), getattr(b, name)
                if name.endswith("_ms"):
                    continue
                if isinstance(x, torch.Tensor):
                    assert torch.equal(x, y), name
                else:
                    assert x == y, name


def test_the_lean_forward_is_only_taken_where_it_was_checked(pairs):
    import torch
    import transformers

    from backend.engine.capture import AuxCapture
    from backend.engine.kv_cache import new_replay_cache
    from backend.engine.lean_target import TargetKVCache, lean_target

    model = pairs["random-L2"].target.model
    assert lean_target(model) is not None
    with AuxCapture(model, (0, 1, 2)):  # SpecLens's own captures: the lean forward calls them itself
        assert isinstance(new_replay_cache(model), TargetKVCache)
    hook = _forced_module_path(model.model.layers[1].mlp)  # anyone else's hook: transformers' forward
    try:
        assert lean_target(model) is None
        assert not isinstance(new_replay_cache(model), TargetKVCache)
    finally:
        hook.remove()
    small = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2)
    small.update(num_attention_heads=4, num_key_value_heads=2)
    qwen = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(head_dim=8, **small)).eval()
    assert lean_target(qwen) is None  # another family
    eager = transformers.LlamaForCausalLM(transformers.LlamaConfig(attn_implementation="eager", **small))
    assert lean_target(eager.eval()) is None  # eager attention computes softmax its own way
    with torch.no_grad():  # weights changed in place: checked again (and put back exactly)
        model.lm_head.weight.mul_(2.0)
        assert lean_target(model) is not None
        model.lm_head.weight.mul_(0.5)


def test_the_target_cache_grows_crops_and_keeps_rows():
    import torch

    from backend.engine.lean_target import TargetKVCache

    cache = TargetKVCache(num_layers=1)
    keys = torch.arange(2 * 70 * 3, dtype=torch.float32).reshape(1, 2, 70, 3)
    cache.reserve(70, keys, -keys, 0)
    cache.keys[0][..., :70, :], cache.values[0][..., :70, :] = keys, -keys
    cache.length = 70
    buffer = cache.keys[0]
    cache.reserve(72, keys, -keys, 0)  # fits: nothing moves
    assert cache.keys[0] is buffer
    cache.reserve(200, keys, -keys, 0)  # grows, keeping what was stored
    assert cache.keys[0].shape[-2] == 264 and torch.equal(cache.keys[0][..., :70, :], keys)
    cache.crop(-10)
    assert cache.get_seq_length() == 60
    with pytest.raises(ValueError):
        cache.crop(3)
    cache.keep_rows(50, [0, 4, 7])
    assert cache.get_seq_length() == 53
    assert torch.equal(cache.keys[0][..., 50:53, :], keys[..., [50, 54, 57], :])
    assert torch.equal(cache.values[0][..., 50:53, :], -keys[..., [50, 54, 57], :])


def test_the_drafts_lean_path_is_its_modules_bit_for_bit(pairs):
    """Eagle3Draft.forward without module calls (the replay's path) against the modules, with a
    cache, with a mask, over several positions and under every variant flag the pair declares."""
    import torch

    from backend.engine.kv_cache import DraftKVCache

    for name in ("random-L6-eagle", "copy-L5-context"):
        draft = pairs[name].draft
        width = 3 * draft.config.target_hidden_size
        features = torch.randn(6, width, generator=torch.Generator().manual_seed(1))
        tokens, positions = torch.tensor([3, 1, 4, 1, 5, 9]), torch.arange(6)
        results = []
        for forced in (False, True):
            hook = _forced_module_path(draft.layers[0]) if forced else None
            try:
                with torch.inference_mode():
                    cache = DraftKVCache(len(draft.layers))
                    out, _ = draft(draft.fuse(features), tokens, positions, cache)
                    step, _ = draft(out[-1:], torch.tensor([2]), torch.tensor([6]), cache)
                    logits = draft.logits(step)
                    masked, _ = draft(draft.fuse(features), tokens, positions, mask=torch.ones(6, 6).bool())
                results.append((out, step, logits, masked))
            finally:
                if hook is not None:
                    hook.remove()
        for lean, modules in zip(*results, strict=True):
            assert torch.equal(lean, modules), name
