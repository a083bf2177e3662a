"""A lean forward for Llama targets on the CPU: transformers' arithmetic without its per-call
machinery (docs/reference.md §7).

On a small target a verify forward is mostly Python, not arithmetic: transformers' decorators,
module calls, mask building and config lookups, plus two copies of the whole KV cache per layer
and forward (`DynamicCache` grows by concatenation, and `repeat_kv` expands grouped-query keys and
values). `LeanTarget` runs the same arithmetic on the target's own weights:

- the KV cache lives in buffers with room to grow (`KVCache`); attention reads prefix views,
  so a forward copies only the new entries;
- grouped-query attention passes `enable_gqa` to SDPA instead of repeating keys and values;
- the causal mask of a verify chunk is built once per forward, boolean as transformers passes it
  (an additive float mask with `enable_gqa` takes SDPA's slow path on the CPU: 0.40 vs 0.09 ms per
  call on the real pair's shapes, bench/replay_bench.py);
- RMSNorm is `F.rms_norm` in fp32;
- RoPE rotates with one `roll` and a sign-folded sine ((-x2)*s == x2*(-s) exactly), q and k at once;
- a projection of 2-32 rows (a verify chunk, a small batch) is weight @ x^T (backend/target/product.py):
  the same products as `F.linear`, summed in another order, and much faster with MKL on this
  machine's CPU for a few rows (the bare replay on the real pair from 17.2 to 24-25 tok/s).

On the CPU a decode (one-token calls) does not change a bit, and `lean_target` checks it: the first
time a model is asked for, its lean forward must reproduce transformers' own forward (logits and
every layer's output) bit for bit over a one-token prefill and one-token steps, and within TOLERANCE
(a ten-thousandth of each tensor's largest magnitude; the product order moves the last places) over
a prefill, a verify chunk, a crop, a one-token step after them, a tree and a prefill computing its
last logits alone; a model that fails any of it keeps transformers' forward. A verify chunk's rows
were never bit-equal to one-token decodes, under transformers either (F.linear of 5 rows rounds
unlike 1 row): where the order moves a near-tie, the replay's greedy tokens can differ from
`generate()`'s, as backend/diagnostics/precision.py measures for any chunked verify; the exactness
tests (tests/engine, tests/test_demo.py) find the outputs equal on both bundled pairs.
`target_runner` makes that choice once, when the Target is loaded (backend/engine/loading.py), and
replays never ask again. It is the default on the CPU; SPECLENS_LEAN_TARGET=0 turns it off (a user
who doubts a run can compare). Only exact `LlamaForCausalLM` models with SDPA attention, on the CPU
and not dispatched by accelerate, take this path; everything else runs transformers' forward on a
`DynamicCache` (backend/target/target_runner.py).

The lean forward runs the modules' arithmetic, not their `__call__`: it returns the states it
captures instead of calling forward hooks, so a forward hook registered on the target's modules does
not run under it. A caller who needs its hooks on the target loads it with SPECLENS_LEAN_TARGET=0.
"""

from __future__ import annotations

import os
import weakref
from itertools import accumulate

import torch
import torch.nn.functional as F

from backend.target.kv_cache import KVCache
from backend.target.product import product
from backend.target.target_runner import TargetOutput, TargetRunner, TransformersRunner


class LeanLayer:
    """One decoder layer's weights and shapes, looked up once per model and weights (`lean_target`
    rebuilds and rechecks the LeanTarget when a parameter is replaced or changed in place; a loaded
    Target keeps the runner it was given, so whoever replaces its parameters gives it a new one).

    The projections stay separate GEMMs: one GEMM over concatenated weights is not always the same
    bit for bit (a one-row product on a 32-wide target differs in the last place)."""

    def __init__(self, layer):
        attention, mlp = layer.self_attn, layer.mlp
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


class LeanTarget(TargetRunner):
    """The lean forward of one Llama model (see the module docstring): a target runner
    (backend/target/target_runner.py)."""

    name = "lean"

    def __init__(self, model):
        base = model.model
        self.embed = base.embed_tokens
        self.rotary = base.rotary_emb
        self.norm = _norm_of(base.norm)
        self.lm_head = _linear_of(model.lm_head)
        self.layers = [LeanLayer(layer) for layer in base.layers[: model.config.num_hidden_layers]]
        self.dtype = self.embed.weight.dtype

    def new_cache(self) -> KVCache:
        return KVCache(len(self.layers))

    @staticmethod
    def _norm(norm: tuple[torch.Tensor, float], hidden: torch.Tensor) -> torch.Tensor:
        weight, eps = norm
        if hidden.dtype == torch.float32 and weight.dtype == torch.float32:
            return F.rms_norm(hidden, weight.shape, weight, eps)
        x = hidden.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return weight * x.to(hidden.dtype)

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def run(self, input_ids, cache: KVCache, positions, tree, wanted, last_logits) -> TargetOutput:
        """transformers' LlamaModel.forward arithmetic (see the module docstring)."""
        return self._run(input_ids, [cache], positions, [input_ids.shape[1]], tree, wanted, last_logits)[0]

    def run_many(self, input_ids, caches, positions, lengths, wanted, last_logits) -> list[TargetOutput]:
        return self._run(input_ids, caches, positions, lengths, None, wanted, last_logits)

    def _run(
        self, input_ids, caches: list[KVCache], positions, lengths: list[int], tree, wanted, last_logits
    ) -> list[TargetOutput]:
        """`run` over B sequences packed one after another (input_ids and positions [1, sum(lengths)],
        one cache each): every projection is one matrix product over all their rows, so the weights
        are read once per forward (the batched replay, backend/engine/batch.py); attention runs per
        sequence on its own cache, as `run` does. One sequence is `run` itself."""
        total, device = input_ids.shape[1], input_ids.device
        bounds = [(end - length, end) for length, end in zip(lengths, accumulate(lengths), strict=True)]
        masks = [
            self._mask(cache.length, length, tree, device)
            for cache, length in zip(caches, lengths, strict=True)
        ]
        states: list[dict[int, torch.Tensor]] = [{} for _ in lengths]
        hidden = self.embed(input_ids)
        cos, sin = self.rotary(hidden, positions)
        half = cos.shape[-1] // 2
        cos = cos[:, None]
        sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)[:, None]
        self._keep(states, bounds, 0, hidden, wanted)
        for index, layer in enumerate(self.layers):
            x = self._norm(layer.input_norm, hidden)
            heads, kv_heads, head_dim = layer.heads, layer.kv_heads, layer.head_dim
            q = product(x, *layer.q).view(1, total, heads, head_dim).transpose(1, 2)
            k = product(x, *layer.k).view(1, total, kv_heads, head_dim).transpose(1, 2)
            values = product(x, *layer.v).view(1, total, kv_heads, head_dim).transpose(1, 2)
            qk = torch.cat((q, k), dim=1)
            qk = qk * cos + qk.roll(half, -1) * sin
            queries, keys = qk[:, :heads], qk[:, heads:]
            attended = []
            for (first, last), cache, (mask, causal) in zip(bounds, caches, masks, strict=True):
                all_keys, all_values = cache.append(index, keys[:, :, first:last], values[:, :, first:last])
                attended.append(
                    F.scaled_dot_product_attention(
                        queries[:, :, first:last],
                        all_keys,
                        all_values,
                        attn_mask=mask,
                        dropout_p=0.0,
                        scale=layer.scaling,
                        is_causal=causal,
                        enable_gqa=heads != kv_heads,
                    )
                )
            attended = attended[0] if len(attended) == 1 else torch.cat(attended, dim=2)
            attended = attended.transpose(1, 2).reshape(1, total, heads * head_dim)
            hidden = hidden + product(attended, *layer.o)
            x = self._norm(layer.post_norm, hidden)
            hidden = hidden + product(layer.act(product(x, *layer.gate)) * product(x, *layer.up), *layer.down)
            self._keep(states, bounds, index + 1, hidden, wanted)
        if last_logits:  # each sequence's last row alone (a prefill reads nothing else)
            hidden = hidden[:, [last - 1 for _, last in bounds]]
            bounds = [(row, row + 1) for row in range(len(bounds))]
        logits = product(self._norm(self.norm, hidden), *self.lm_head)
        return [
            TargetOutput(logits[:, first:last], kept)
            for (first, last), kept in zip(bounds, states, strict=True)
        ]

    @staticmethod
    def _keep(states: list[dict], bounds, index: int, hidden: torch.Tensor, wanted) -> None:
        if index in wanted:
            for (first, last), kept in zip(bounds, states, strict=True):
                kept[index] = hidden[0, first:last]

    def _mask(self, past: int, length: int, tree, device) -> tuple[torch.Tensor | None, bool]:
        """One sequence's attention mask for `length` new tokens after `past` cached ones, boolean
        (True: attend; see the module docstring): a tree's (every cached entry and the node's
        ancestors), transformers' causal mask, or SDPA's own causal flag for a prefill (None, True)."""
        if tree is not None:
            seen = torch.ones(length, past + length, dtype=torch.bool, device=device)
            seen[:, past:] = tree[1].to(device)
            return seen[None, None], False
        if length > 1 and past:
            rows = torch.arange(past, past + length, device=device)[:, None]
            return (torch.arange(past + length, device=device)[None, :] <= rows)[None, None], False
        return None, length > 1


# ----------------------------------------------------------------------------------- eligibility

_LEAN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (fingerprint, LeanTarget | None)


OPT_OUT = "SPECLENS_LEAN_TARGET"  # "0": targets never take the lean forward; unset or anything else: they may


def target_runner(model) -> TargetRunner:
    """The runner of a target's forwards, chosen once when it is loaded: the lean forward where it
    agrees with transformers' own (`_agrees_with_transformers`), else transformers' forward."""
    return lean_target(model) or TransformersRunner(model)


def lean_target(model) -> LeanTarget | None:
    """The model's lean forward when it is eligible and agrees with transformers' forward (bit for
    bit over a decode, within TOLERANCE over multi-row calls; checked once per model and weights),
    unless SPECLENS_LEAN_TARGET=0; None otherwise. The check covers the calls it tries; the
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
        lean = lean if _agrees_with_transformers(model, lean) else None
    except Exception:  # noqa: BLE001 - any surprise in a model we thought we knew: keep transformers' forward
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
        return False  # a dispatched target (backend/target/dispatch.py) runs through accelerate's hooks
    if any(p.device.type != "cpu" for p in model.parameters()):
        return False
    if any(getattr(module, "_hf_hook", None) is not None for module in model.modules()):
        return False  # accelerate's offload hooks move weights in and out around each module call
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
    return type(base.norm) is LlamaRMSNorm


def _fingerprint(model) -> tuple:
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


TOLERANCE = 1e-4  # of a tensor's largest magnitude: how far a multi-row call may round from transformers'


def _agrees_with_transformers(model, lean: LeanTarget) -> bool:
    """Both forwards over the same sequences of calls, logits and every layer's output compared: a
    decode (a one-token prefill, then one-token steps) must be equal bit for bit; a prefill, a verify
    chunk, a crop, a one-token step, a tree, and a prefill computing its last logits alone must be
    equal within TOLERANCE (their products of several rows are summed in another order: `product`)."""
    reference = TransformersRunner(model)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, 16), generator=torch.Generator().manual_seed(0))
    device = model.lm_head.weight.device
    ids = ids.to(device)
    depths = torch.tensor([0, 1, 1, 2])
    visible = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    sequences = {  # name: [(input slice, start position, keep before the call, tree, last logits)]
        "decode": [
            ((13, 14), 0, None, None, False),
            ((14, 15), 1, None, None, False),
            ((15, 16), 2, None, None, False),
        ],
        "replay": [
            ((0, 6), 0, None, None, False),
            ((6, 11), 6, None, None, False),
            ((8, 9), 8, 8, None, False),
            ((9, 13), 9, None, (depths, visible), False),
            ((13, 14), 11, 11, None, False),
        ],
        "prefill": [((0, 9), 0, None, None, True)],  # a replay's: `generate()` computes that row alone
    }
    layers = tuple(range(model.config.num_hidden_layers + 1))
    with torch.inference_mode():
        for name, calls in sequences.items():
            same = torch.equal if name == "decode" else within_rounding
            reference_cache, lean_cache = reference.new_cache(), lean.new_cache()
            for (first, last), start, keep, tree, last_logits in calls:
                if keep is not None:
                    reference_cache.crop(keep)
                    lean_cache.crop(keep)
                chunk = ids[:, first:last]
                expected = reference.forward(chunk, reference_cache, start, tree, layers, last_logits)
                got = lean.forward(chunk, lean_cache, start, tree, layers, last_logits)
                if not same(got.logits, expected.logits):
                    return False
                if not all(same(got.states[i], expected.states[i]) for i in layers):
                    return False
                if lean_cache.length != reference_cache.length:
                    return False
    return True


def within_rounding(got: torch.Tensor, expected: torch.Tensor) -> bool:
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    return got.shape == expected.shape and float((got - expected).abs().max()) <= TOLERANCE * max(1.0, scale)
