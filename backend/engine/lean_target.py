"""A lean forward for Llama targets on the CPU: transformers' arithmetic without its per-call
machinery, bit for bit (docs/reference.md §7).

On a small target a verify forward is mostly Python, not arithmetic: transformers' decorators,
module calls, mask building and config lookups, plus two copies of the whole KV cache per layer
and forward (`DynamicCache` grows by concatenation, and `repeat_kv` expands grouped-query keys and
values). `LeanTarget` runs the same arithmetic on the target's own weights:

- the KV cache lives in buffers with room to grow (`TargetKVCache`); attention reads prefix views,
  so a forward copies only the new entries;
- grouped-query attention passes `enable_gqa` to SDPA instead of repeating keys and values;
- the causal mask of a verify chunk is made additive (0 / -inf) once per forward, as SDPA makes a
  boolean mask additive in every layer;
- RMSNorm is `F.rms_norm` in fp32;
- RoPE rotates with one `roll` and a sign-folded sine ((-x2)*s == x2*(-s) exactly), q and k at once.

On the CPU none of these changes a bit, and `lean_target` checks it: the first time a model is
asked for, its lean forward must reproduce transformers' own forward (logits and every layer's
output, bit for bit) over a prefill, a verify chunk, a one-token step, a tree and a one-token
prefill; a model that fails any of it keeps transformers' forward. It is the default on the CPU
(on the demo pair it takes the job runner from 1.19x to 1.89x `generate()`, bench/replay_bench.py
--demo); SPECLENS_LEAN_TARGET=0 turns it off. Only exact `LlamaForCausalLM`
models with SDPA attention, on the CPU, with no forward hooks but SpecLens's own captures, take this
path; everything else runs transformers' forward on a `DynamicCache`, as before.
"""

from __future__ import annotations

import os
import weakref
from types import SimpleNamespace

import torch
import torch.nn.functional as F


class TargetKVCache:
    """The target's keys/values for one sequence, in buffers with room to grow (a quarter more, at
    least 64 entries): entry i is position i of the committed sequence (tree verifies keep the root
    and the accepted path). A forward writes only its new entries; crop only moves the length."""

    def __init__(self, num_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self.length = 0
        self.capacity = 0

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, count: int) -> None:
        """transformers 5.x semantics: a negative count removes that many entries."""
        if count > 0:
            raise ValueError(f"crop takes a negative count of entries to remove, not {count}")
        self.length = max(0, self.length + count)

    def reserve(self, needed: int, like_keys: torch.Tensor, like_values: torch.Tensor, layer: int) -> None:
        """Room for `needed` entries in `layer` (shapes from the new keys/values [1, heads, T, d])."""
        buffer = self.keys[layer]
        if buffer is not None and buffer.shape[-2] >= needed:
            return
        capacity = max(needed + 64, needed + needed // 4)  # room to grow, never twice the cache
        self.keys[layer] = self._grown(buffer, like_keys, capacity)
        self.values[layer] = self._grown(self.values[layer], like_values, capacity)

    def _grown(self, buffer: torch.Tensor | None, like: torch.Tensor, capacity: int) -> torch.Tensor:
        grown = like.new_empty((*like.shape[:-2], capacity, like.shape[-1]))
        if buffer is not None and self.length:
            grown[..., : self.length, :] = buffer[..., : self.length, :]
        return grown

    def keep_rows(self, start: int, rows: list[int]) -> None:
        """Keep the entries before `start`, then start + r for r in `rows`, in that order."""
        for layer, keys in enumerate(self.keys):
            if keys is None:
                continue
            index = torch.tensor(rows, device=keys.device) + start
            end = start + len(rows)
            keys[..., start:end, :] = keys.index_select(-2, index)
            values = self.values[layer]
            values[..., start:end, :] = values.index_select(-2, index)
        self.length = start + len(rows)


class LeanLayer:
    """One decoder layer's weights and shapes, looked up once per replay (`lean_target` rebuilds
    the LeanTarget when any parameter is replaced).

    The projections stay separate GEMMs: one GEMM over concatenated weights is not always the same
    bit for bit (a one-row product on a 32-wide target differs in the last place)."""

    def __init__(self, layer):
        attention, mlp = layer.self_attn, layer.mlp
        self.module = layer
        self.input_norm = _norm_of(layer.input_layernorm)
        self.post_norm = _norm_of(layer.post_attention_layernorm)
        self.heads = attention.config.num_attention_heads
        self.kv_heads = attention.config.num_key_value_heads
        self.head_dim = attention.head_dim
        self.scaling = attention.scaling
        self.q, self.k, self.v, self.o = (
            _linear_of(p) for p in (attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj)
        )
        self.gate, self.up, self.down = (_linear_of(p) for p in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
        self.act = mlp.act_fn


def _linear_of(linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    return linear.weight, linear.bias


def _norm_of(norm) -> tuple[torch.Tensor, float]:
    return norm.weight, norm.variance_epsilon


class LeanTarget:
    """The lean forward of one Llama model (see the module docstring)."""

    def __init__(self, model):
        base = model.model
        self.model_ref = weakref.ref(model)  # weak: _LEAN is keyed by the model
        self.embed = base.embed_tokens
        self.rotary = base.rotary_emb
        self.norm = _norm_of(base.norm)
        self.lm_head = _linear_of(model.lm_head)
        self.layers = [LeanLayer(layer) for layer in base.layers[: model.config.num_hidden_layers]]
        self.dtype = self.embed.weight.dtype

    def new_cache(self) -> TargetKVCache:
        return TargetKVCache(len(self.layers))

    @staticmethod
    def _norm(norm: tuple[torch.Tensor, float], hidden: torch.Tensor) -> torch.Tensor:
        weight, eps = norm
        if hidden.dtype == torch.float32 and weight.dtype == torch.float32:
            return F.rms_norm(hidden, weight.shape, weight, eps)
        x = hidden.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return weight * x.to(hidden.dtype)

    def forward(
        self,
        input_ids: torch.Tensor,
        cache: TargetKVCache,
        start_position: int,
        tree: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> SimpleNamespace:
        """Logits [1, T, V] of `input_ids` [1, T] at start..start+T-1 (a tree: start + depths, each
        token seeing the cache and its ancestors), appending T entries to `cache`."""
        length = input_ids.shape[1]
        device = input_ids.device
        past = cache.length
        hidden = self.embed(input_ids)
        if tree is None:
            positions = torch.arange(start_position, start_position + length, device=device)[None]
        else:
            depths, visible = tree
            positions = (start_position + depths.to(device))[None]
        cos, sin = self.rotary(hidden, positions)
        half = cos.shape[-1] // 2
        cos = cos[:, None]
        sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)[:, None]
        mask, causal = None, False
        if tree is not None:
            seen = torch.ones(length, past + length, dtype=torch.bool, device=device)
            seen[:, past:] = visible.to(device)
            additive = torch.zeros(seen.shape, dtype=self.dtype, device=device)
            mask = additive.masked_fill(~seen, torch.finfo(self.dtype).min)[None, None]
        elif length > 1 and past:  # transformers' boolean causal mask, made additive once per forward
            rows = torch.arange(past, past + length, device=device)[:, None]
            hidden_future = torch.arange(past + length, device=device)[None, :] > rows
            mask = torch.zeros(hidden_future.shape, dtype=hidden.dtype, device=device)
            mask = mask.masked_fill_(hidden_future, float("-inf"))[None, None]
        elif length > 1:
            causal = True
        end = past + length
        first = self.layers[0].module
        for key, hook in first._forward_pre_hooks.items():
            if key in first._forward_pre_hooks_with_kwargs:
                hook(first, (hidden,), {})
            else:
                hook(first, (hidden,))
        for index, layer in enumerate(self.layers):
            x = self._norm(layer.input_norm, hidden)
            heads, kv_heads, head_dim = layer.heads, layer.kv_heads, layer.head_dim
            q = F.linear(x, *layer.q).view(1, length, heads, head_dim).transpose(1, 2)
            k = F.linear(x, *layer.k).view(1, length, kv_heads, head_dim).transpose(1, 2)
            values = F.linear(x, *layer.v).view(1, length, kv_heads, head_dim).transpose(1, 2)
            qk = torch.cat((q, k), dim=1)
            qk = qk * cos + qk.roll(half, -1) * sin
            queries, keys = qk[:, :heads], qk[:, heads:]
            cache.reserve(end, keys, values, index)
            key_buffer, value_buffer = cache.keys[index], cache.values[index]
            key_buffer[..., past:end, :] = keys
            value_buffer[..., past:end, :] = values
            attended = F.scaled_dot_product_attention(
                queries,
                key_buffer[..., :end, :],
                value_buffer[..., :end, :],
                attn_mask=mask,
                dropout_p=0.0,
                scale=layer.scaling,
                is_causal=causal,
                enable_gqa=heads != kv_heads,
            )
            attended = attended.transpose(1, 2).reshape(1, length, heads * head_dim)
            hidden = hidden + F.linear(attended, *layer.o)
            x = self._norm(layer.post_norm, hidden)
            hidden = hidden + F.linear(
                layer.act(F.linear(x, *layer.gate)) * F.linear(x, *layer.up), *layer.down
            )
            module = layer.module
            for hook in module._forward_hooks.values():
                hook(module, (hidden,), hidden)
        cache.length = end
        logits = F.linear(self._norm(self.norm, hidden), *self.lm_head)
        return SimpleNamespace(logits=logits)


# ----------------------------------------------------------------------------------- eligibility

_LEAN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (fingerprint, LeanTarget | None)


OPT_OUT = "SPECLENS_LEAN_TARGET"  # "0": replays never take the lean forward; unset or anything else: they may


def lean_target(model) -> LeanTarget | None:
    """The model's lean forward when it is eligible and reproduces transformers' forward bit for
    bit (checked once per model and weights), unless SPECLENS_LEAN_TARGET=0; None otherwise. The
    check covers the calls it tries (prefill, verify chunk, crop, one-token step, tree); the
    replay's own exactness tests (tests/engine) run on this path, and a user who doubts it can
    compare a run with SPECLENS_LEAN_TARGET=0."""
    if os.environ.get(OPT_OUT) == "0" or not _eligible(model):
        return None
    fingerprint = _fingerprint(model)
    known = _LEAN.get(model)
    if known is not None and known[0] == fingerprint:
        return known[1]
    lean = LeanTarget(model)
    try:
        lean = lean if _reproduces_transformers(model, lean) else None
    except Exception:  # any surprise in a model we thought we knew: keep transformers' forward
        lean = None
    _LEAN[model] = (fingerprint, lean)
    return lean


def _eligible(model) -> bool:
    try:
        from transformers import LlamaForCausalLM
        from transformers.models.llama.modeling_llama import (
            LlamaAttention,
            LlamaDecoderLayer,
            LlamaMLP,
            LlamaModel,
            LlamaRMSNorm,
        )
    except ImportError:
        return False
    if type(model) is not LlamaForCausalLM or type(model.model) is not LlamaModel or model.training:
        return False
    config = model.config
    if getattr(config, "_attn_implementation", None) != "sdpa" or getattr(config, "pretraining_tp", 1) != 1:
        return False
    if config.num_hidden_layers != len(model.model.layers) or getattr(model, "hf_device_map", None):
        return False  # a dispatched target (backend/engine/dispatch.py) runs through accelerate's hooks
    if any(p.device.type != "cpu" for p in model.parameters()):
        return False
    if any(hasattr(module, "_hf_hook") for module in model.modules()):
        return False
    base = model.model
    for layer in base.layers:
        if (
            type(layer) is not LlamaDecoderLayer
            or type(layer.self_attn) is not LlamaAttention
            or type(layer.mlp) is not LlamaMLP
            or type(layer.input_layernorm) is not LlamaRMSNorm
            or type(layer.post_attention_layernorm) is not LlamaRMSNorm
        ):
            return False
    if type(base.norm) is not LlamaRMSNorm:
        return False
    return _only_capture_hooks(model)


def _only_capture_hooks(model) -> bool:
    """The lean forward calls SpecLens's capture hooks on decoder layers itself; any other hook
    (on any module, or global) would be skipped, so its model keeps transformers' forward."""
    from torch.nn.modules import module as torch_module

    for name in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks"):
        if getattr(torch_module, name, None):
            return False
    layers = set(map(id, model.model.layers))
    for module in model.modules():
        hooks = list(module._forward_hooks.values()) + list(module._forward_pre_hooks.values())
        if not hooks:
            continue
        if id(module) not in layers or not all(getattr(h, "speclens_capture", False) for h in hooks):
            return False
        if module._forward_pre_hooks and module is not model.model.layers[0]:
            return False
    return True


def _fingerprint(model) -> tuple:
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def _reproduces_transformers(model, lean: LeanTarget) -> bool:
    """Both forwards over the same sequence of calls: prefill, a verify chunk, a crop, a one-token
    step, a tree and a one-token prefill; logits and every layer's output must be equal bit for bit."""
    from backend.engine.capture import AuxCapture
    from backend.engine.kv_cache import crop_target_cache, new_target_cache, target_forward

    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, 16), generator=torch.Generator().manual_seed(0))
    device = model.lm_head.weight.device
    ids = ids.to(device)
    depths = torch.tensor([0, 1, 1, 2])
    visible = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    calls = [  # (input slice, start position, keep before the call, tree)
        ((0, 6), 0, None, None),
        ((6, 11), 6, None, None),
        ((8, 9), 8, 8, None),
        ((9, 13), 9, None, (depths, visible)),
        ((13, 14), 11, 11, None),
    ]
    layers = range(model.config.num_hidden_layers + 1)
    with torch.inference_mode(), AuxCapture(model, layers) as capture:
        for fresh in (False, True):
            reference_cache, lean_cache = new_target_cache(model), lean.new_cache()
            for (first, last), start, keep, tree in calls[:1] if fresh else calls:
                chunk = ids[:, 13:14] if fresh else ids[:, first:last]
                if keep is not None:
                    crop_target_cache(reference_cache, keep)
                    crop_target_cache(lean_cache, keep)
                expected = target_forward(model, chunk, reference_cache, start, tree).logits
                expected_states = [capture.captured[i].clone() for i in layers]
                got = lean.forward(chunk, lean_cache, start, tree).logits
                if not torch.equal(expected, got):
                    return False
                if not all(torch.equal(expected_states[i], capture.captured[i]) for i in layers):
                    return False
                if lean_cache.length != reference_cache.get_seq_length():
                    return False
    return True
