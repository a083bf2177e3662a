"""The lean forwards (backend/target/lean_target.py, Eagle3Draft's one forward): the same numbers as
transformers' forward and as the draft's modules called as modules, bit for bit, and only where that
is checked."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def default_environment(monkeypatch):
    """The lean target forward is the default (SPECLENS_LEAN_TARGET unset); these tests exercise it."""
    monkeypatch.delenv("SPECLENS_LEAN_TARGET", raising=False)


def test_the_lean_target_forward_is_on_unless_turned_off(pairs, monkeypatch):
    from backend.target.lean_target import LeanTarget, lean_target, target_runner
    from backend.target.target_runner import TransformersRunner

    model = pairs["random-L2"].target.model
    assert lean_target(model) is not None and isinstance(target_runner(model), LeanTarget)
    assert isinstance(pairs["random-L2"].target.runner, LeanTarget)  # chosen when it was loaded
    monkeypatch.setenv("SPECLENS_LEAN_TARGET", "0")
    assert lean_target(model) is None
    assert isinstance(target_runner(model), TransformersRunner)  # transformers' own forward


def test_the_lean_forward_agrees_with_transformers(pairs):
    """A decode (one-token calls) bit for bit; prefill, verify chunks, crops, a tree, keep_rows,
    one-token steps after them and a context past the cache's first buffer within the lean check's
    tolerance (several rows' products are summed in another order: lean_target.product), and the
    caches stay as long."""
    import torch

    from backend.target.kv_cache import KVCache
    from backend.target.lean_target import LeanTarget, within_rounding
    from backend.target.target_runner import TransformersRunner

    model = pairs["random-L6-eagle"].target.model
    layers = tuple(range(model.config.num_hidden_layers + 1))
    ids = torch.randint(0, model.config.vocab_size, (1, 160), generator=torch.Generator().manual_seed(3))
    depths = torch.tensor([0, 1, 1, 2, 2])
    visible = torch.tensor(
        [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]],
        dtype=torch.bool,
    )
    lean_runner, reference_runner = LeanTarget(model), TransformersRunner(model)
    with torch.inference_mode():
        lean = lean_runner.new_cache()
        assert isinstance(lean, KVCache)
        reference = reference_runner.new_cache()

        def both(chunk, start, tree=None, same=within_rounding):
            expected = reference_runner.forward(chunk, reference, start, tree, layers)
            got = lean_runner.forward(chunk, lean, start, tree, layers)
            assert same(got.logits, expected.logits)
            assert all(same(got.states[i], expected.states[i]) for i in layers)
            assert lean.length == reference.length

        for position in range(12):  # a decode: one token at a time, bit for bit
            both(ids[:, position : position + 1], position, same=torch.equal)
        lean, reference = lean_runner.new_cache(), reference_runner.new_cache()

        both(ids[:, :7], 0)
        position = 7
        while position < 150:  # verify chunks of 5, then keep 3 (a rejection), past 64 entries
            both(ids[:, position : position + 5], position)
            reference.crop(position + 3)
            lean.crop(position + 3)
            position += 3
        both(ids[:, position : position + 1], position)  # a one-token step
        position += 1
        both(ids[:, position : position + 5], position, (depths, visible))  # a tree
        for cache in (reference, lean):
            cache.keep_rows(position, [0, 2, 4])  # the root and the path down the second branch
        both(ids[:, 150:155], position + 3)
        # a prefill computing its last logits alone, as generate() computes its own (logits_to_keep=1)
        fresh_lean, fresh_reference = lean_runner.new_cache(), reference_runner.new_cache()
        expected = reference_runner.forward(ids[:, :40], fresh_reference, 0, None, layers, last_logits=True)
        got = lean_runner.forward(ids[:, :40], fresh_lean, 0, None, layers, last_logits=True)
        assert got.logits.shape == (1, 1, model.config.vocab_size) and within_rounding(
            got.logits, expected.logits
        )
        assert all(within_rounding(got.states[i], expected.states[i]) for i in layers)
        # and a broken lean forward is told apart: the tolerance is the last places, not the numbers
        assert not within_rounding(got.states[layers[-1]] * 1.001, expected.states[layers[-1]])


@pytest.mark.parametrize("runner_kind", ["lean", "transformers"])
def test_sequences_of_any_lengths_run_packed_as_each_would_alone(pairs, runner_kind):
    """forward_many (the batched replay's prefills and verify steps): prompts of different lengths
    on fresh caches, then chunks of different lengths after them; each sequence's logits (all, or
    the last alone), states and cache as its own forward gives them, within the rounding of a matrix
    product over more rows."""
    import torch

    from backend.target.lean_target import LeanTarget
    from backend.target.target_runner import TransformersRunner

    model = pairs["random-L6-eagle"].target.model
    runner = LeanTarget(model) if runner_kind == "lean" else TransformersRunner(model)
    layers = (0, 2, 5)
    generator = torch.Generator().manual_seed(5)
    prompts = [
        torch.randint(0, model.config.vocab_size, (n,), generator=generator).tolist() for n in (3, 11, 1, 7)
    ]
    chunks = [
        torch.randint(0, model.config.vocab_size, (n,), generator=generator).tolist() for n in (5, 1, 3, 5)
    ]
    close = dict(atol=1e-4, rtol=1e-4)  # states reach ~50 here
    with torch.inference_mode():
        alone = [runner.new_cache() for _ in prompts]
        packed = [runner.new_cache() for _ in prompts]
        for last_logits, sequences, starts in (
            (True, prompts, [0] * len(prompts)),
            (False, chunks, [len(p) for p in prompts]),
        ):
            outputs = runner.forward_many(sequences, packed, starts, layers, last_logits)
            for sequence, start, cache, output in zip(sequences, starts, alone, outputs, strict=True):
                ids = torch.tensor([sequence])
                expected = runner.forward(ids, cache, start, None, layers, last_logits)
                assert output.logits.shape == expected.logits.shape
                assert torch.allclose(output.logits, expected.logits, **close)
                assert all(torch.allclose(output.states[i], expected.states[i], **close) for i in layers)
        assert (
            [c.length for c in packed]
            == [c.length for c in alone]
            == [len(p) + len(c) for p, c in zip(prompts, chunks, strict=True)]
        )


def test_a_replay_takes_the_lean_path_and_records_the_same_steps(pairs):
    """The whole replay (chain and tree, recorded) on the lean forward equals the replay on
    transformers' forward, record for record: the same tokens and counts, every tensor and
    probability within the lean check's rounding."""
    from dataclasses import replace

    import torch

    from backend.engine.replay import ReplayConfig, replay
    from backend.target.lean_target import LeanTarget, within_rounding
    from backend.target.target_runner import TransformersRunner

    # the tree on a random draft: copy-L5-context's hand-built draft ties exactly, and which tied node
    # a tree keeps then follows the last places (seen flipping under load, issue 56)
    for pair_name, config in (
        ("copy-L5-context", ReplayConfig(3, 40)),
        ("random-L6-eagle", ReplayConfig(3, 30, topk=2, num_draft_tokens=5)),
    ):
        pair = pairs[pair_name]
        assert isinstance(pair.target.runner, LeanTarget)
        transformers_target = replace(pair.target, runner=TransformersRunner(pair.target.model))
        lean = list(replay(pair.target, pair.draft, [1, 5, 9, 3], pair.wiring, config))
        plain = list(replay(transformers_target, pair.draft, [1, 5, 9, 3], pair.wiring, config))
        assert len(lean) == len(plain)
        for a, b in zip(lean, plain, strict=True):
            for name in a.__dataclass_fields__:
                x, y = getattr(a, name), getattr(b, name)
                if name.endswith("_ms"):
                    continue
                if isinstance(x, torch.Tensor):
                    assert within_rounding(x, y), name
                elif name == "tree":
                    assert (x.tokens, x.accepted_path) == (y.tokens, y.accepted_path), name
                elif name.endswith("probs"):
                    assert within_rounding(torch.tensor(x), torch.tensor(y)), name
                else:
                    assert x == y, name


def test_the_lean_forward_is_only_taken_where_it_was_checked(pairs):
    import torch
    import transformers

    from backend.target.lean_target import lean_target

    model = pairs["random-L2"].target.model
    assert lean_target(model) is not None
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


def test_the_cache_grows_crops_and_keeps_rows():
    import torch

    from backend.target.kv_cache import KVCache

    cache = KVCache(num_layers=1)
    keys = torch.arange(2 * 70 * 3, dtype=torch.float32).reshape(1, 2, 70, 3)
    all_keys, all_values = cache.append(0, keys, -keys)
    assert torch.equal(all_keys, keys) and torch.equal(all_values, -keys) and cache.length == 70
    buffer = cache.keys[0]
    cache.crop(68)
    cache.append(0, keys[..., 68:, :], -keys[..., 68:, :])  # fits: nothing moves
    assert cache.keys[0] is buffer and cache.length == 70
    more = torch.zeros(1, 2, 130, 3)
    cache.append(0, more, more)  # grows, keeping what was stored
    assert cache.keys[0] is not buffer and cache.keys[0].shape[-2] >= 200 and cache.length == 200
    assert torch.equal(cache.keys[0][..., :70, :], keys)
    cache.crop(60)
    assert cache.length == 60
    with pytest.raises(ValueError, match="cannot grow"):
        cache.crop(63)
    cache.keep_rows(50, [0, 4, 7])
    assert cache.length == 53
    assert torch.equal(cache.keys[0][..., 50:53, :], keys[..., [50, 54, 57], :])
    assert torch.equal(cache.values[0][..., 50:53, :], -keys[..., [50, 54, 57], :])


def _modules_forward(draft, hidden, token_ids, positions, cache=None, mask=None):
    """The draft's step with every module called as a module (LlamaRMSNorm, nn.Linear, LlamaMLP,
    transformers' apply_rotary_pos_emb): the reference its one forward must equal bit for bit."""
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from backend.engine.draft_model import attend, causal_mask

    math = draft.default_math
    embeds = draft.embed(token_ids, math).to(hidden.dtype)
    cos, sin = draft.rotary(hidden, positions[None])
    if mask is None and hidden.shape[0] > 1:
        mask = causal_mask(cache.length if cache is not None else 0, hidden.shape[0], hidden.device)
    for index, layer in enumerate(draft.layers):
        if layer.first:
            normed = layer.hidden_norm(hidden)
            attn_in = torch.cat([layer.input_layernorm(embeds), normed], dim=-1)
            residual = normed if math.norm_before_residual else hidden
        else:
            attn_in, residual = layer.input_layernorm(hidden), hidden
        attention, m = layer.self_attn, attn_in.shape[0]
        q = attention.q_proj(attn_in).view(m, attention.num_heads, attention.head_dim)
        k = attention.k_proj(attn_in).view(m, attention.num_kv_heads, attention.head_dim)
        if math.qk_norm:
            q, k = attention.q_norm(q), attention.k_norm(k)
        v = attention.v_proj(attn_in).view(m, attention.num_kv_heads, attention.head_dim).transpose(0, 1)
        q, k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
        q, k = q[0], k[0]
        keys, values = cache.append(index, k, v) if cache is not None else (k, v)
        attended = attend(q, keys, values, mask, attention.num_heads != attention.num_kv_heads)
        hidden = residual + attention.o_proj(attended.transpose(0, 1).reshape(m, -1))
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    return hidden


def test_the_drafts_forward_is_its_modules_arithmetic(pairs):
    """Eagle3Draft's one forward (the modules' arithmetic, no module calls) against the modules
    called as modules, with a cache, with a mask, over several positions and under every variant
    flag the pair declares: one row bit for bit, several within the rounding of their products'
    order (backend/target/product.py)."""
    import torch

    from backend.target.kv_cache import KVCache
    from backend.target.lean_target import within_rounding

    for name in ("random-L6-eagle", "copy-L5-context"):
        draft = pairs[name].draft
        width = 3 * draft.config.target_hidden_size
        features = torch.randn(6, width, generator=torch.Generator().manual_seed(1))
        tokens, positions = torch.tensor([3, 1, 4, 1, 5, 9]), torch.arange(6)
        with torch.inference_mode():
            one, reference = KVCache(len(draft.layers)), KVCache(len(draft.layers))
            out = draft(draft.fuse(features), tokens, positions, one)
            expected = _modules_forward(draft, draft.fuse(features), tokens, positions, reference)
            assert within_rounding(out, expected), name
            step = draft(out[-1:], torch.tensor([2]), torch.tensor([6]), one)
            expected = _modules_forward(draft, out[-1:], torch.tensor([2]), torch.tensor([6]), reference)
            assert within_rounding(step, expected), name  # the caches hold the rows above
            assert torch.equal(draft.logits(step), draft.lm_head(draft.norm(step)).float()), name
            fresh, fresh_reference = KVCache(len(draft.layers)), KVCache(len(draft.layers))
            row = draft.fuse(features[:1])
            alone = draft(row, tokens[:1], positions[:1], fresh)  # one row: bit for bit
            assert torch.equal(
                alone, _modules_forward(draft, row, tokens[:1], positions[:1], fresh_reference)
            )
            mask = torch.ones(6, 6).bool()
            masked = draft(draft.fuse(features), tokens, positions, mask=mask)
            expected = _modules_forward(draft, draft.fuse(features), tokens, positions, mask=mask)
            assert within_rounding(masked, expected), name
