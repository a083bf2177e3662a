"""The EAGLE-3 draft network (docs/reference.md §3), written out so each step is visible.

One forward over m positions takes the hidden input `h` (fused target features, 3*Ht wide, or the
draft's own previous output, H wide), the embeddings of the tokens one ahead, and RoPE positions:

    g = fc(h)                          (only when h is 3*Ht wide; variants normalise h first)
    u = [input_layernorm(e), hidden_norm(g)]           embedding FIRST, 2H wide
    r = g + o_proj(attention(u))       (norm_before_residual: r = hidden_norm(g) + ...)
    out = r + mlp(post_attention_layernorm(r))         -> fed back as the next step's hidden
    logits = lm_head(norm(out))        over the draft vocab; target id = d + d2t[d]

Which variants apply, what is fed back (out, or norm(out) under EAGLE 3.1 readings) and whose
embedding `e` is come from a `DraftMath`: the reading of one engine (backend/engine/readings.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.llama.modeling_llama import (
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

from backend.engine.draft_config import DraftConfig
from backend.engine.kv_cache import DraftKVCache
from backend.engine.readings import DraftMath


def rms_norm(norm: LlamaRMSNorm, hidden: torch.Tensor) -> torch.Tensor:
    """`norm(hidden)`, as one call in fp32: `F.rms_norm` is composed of the same operations as
    LlamaRMSNorm there (pow, mean, add eps, rsqrt, two products), so every bit is the same."""
    if hidden.dtype == torch.float32 and norm.weight.dtype == torch.float32:
        return F.rms_norm(hidden, norm.weight.shape, norm.weight, norm.variance_epsilon)
    return norm(hidden)


def linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, layer.weight, layer.bias)


def rotate(states: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """RoPE as transformers computes it, `x*cos + rotate_half(x)*sin`, with rotate_half(x)*sin
    written as roll(x)*signed_sin (signed_sin = [-sin_1, sin_2]): (-x2)*s and x2*(-s) are the same
    number, so every bit is the same, in fewer operations."""
    return states * cos + states.roll(cos.shape[-1] // 2, -1) * signed_sin


def signed(sin: torch.Tensor) -> torch.Tensor:
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def attend(q, keys, values, mask, gqa: bool) -> torch.Tensor:
    """SDPA over [heads, m, head_dim] as one batch of 4-D inputs: 3-D inputs fall back to SDPA's
    unfused math kernel on the CPU (2-3x slower per call, and more with the context)."""
    batched = F.scaled_dot_product_attention(
        q[None], keys[None], values[None], attn_mask=mask, enable_gqa=gqa
    )
    return batched[0]


class DraftAttention(nn.Module):
    def __init__(self, config: DraftConfig, input_width: int):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        bias = config.attention_bias
        self.q_proj = nn.Linear(input_width, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(input_width, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(input_width, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)
        if config.qk_norm:  # Qwen3-style layer: per-head RMSNorm on q and k before RoPE
            self.q_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)
            self.k_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(
        self,
        x,
        rope,
        mask,
        past=None,
        cache: DraftKVCache | None = None,
        layer: int = 0,
        qk_norm: bool = False,
    ):
        """x [m, W] -> attention output [m, H], and this call's new (keys, values).

        Keys come from the cache (inference: the new entries are appended first) or from `past`
        (the teacher-forced TTT layout); mask [m, all keys] bool, True = attend, None = attend to all.
        """
        m = x.shape[0]
        q = self.q_proj(x).view(m, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(m, self.num_kv_heads, self.head_dim)
        if qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(0, 1), k.transpose(0, 1)
        v = self.v_proj(x).view(m, self.num_kv_heads, self.head_dim).transpose(0, 1)
        cos, sin = rope
        q, k = apply_rotary_pos_emb(q[None], k[None], cos, sin)
        q, k = q[0], k[0]
        if cache is not None:
            keys, values = cache.append(layer, k, v)
        elif past is not None:
            keys, values = torch.cat([past[0], k], dim=-2), torch.cat([past[1], v], dim=-2)
        else:
            keys, values = k, v
        attended = attend(q, keys, values, mask, self.num_heads != self.num_kv_heads)
        return self.o_proj(attended.transpose(0, 1).reshape(m, -1)), (k, v)

    def lean(self, x, cos, signed_sin, mask, cache: DraftKVCache | None, layer: int, qk_norm: bool):
        """`forward` without module calls (no `past`): the same operations on the same numbers.
        q and k are rotated together; cos/signed_sin are [m, head_dim]."""
        m = x.shape[0]
        q = linear(self.q_proj, x).view(m, self.num_heads, self.head_dim)
        k = linear(self.k_proj, x).view(m, self.num_kv_heads, self.head_dim)
        if qk_norm:
            q, k = rms_norm(self.q_norm, q), rms_norm(self.k_norm, k)
        v = linear(self.v_proj, x).view(m, self.num_kv_heads, self.head_dim).transpose(0, 1)
        qk = rotate(torch.cat((q, k), dim=1).transpose(0, 1), cos, signed_sin)
        q, k = qk[: self.num_heads], qk[self.num_heads :]
        keys, values = cache.append(layer, k, v) if cache is not None else (k, v)
        attended = attend(q, keys, values, mask, self.num_heads != self.num_kv_heads)
        return linear(self.o_proj, attended.transpose(0, 1).reshape(m, -1)), (k, v)


class DraftLayer(nn.Module):
    """Layer 0 takes [embedding, hidden] (2H wide); later layers of multi-layer drafts take H."""

    def __init__(self, config: DraftConfig, first: bool):
        super().__init__()
        hidden = config.hidden_size
        self.first = first
        self.input_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        if first:
            self.hidden_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.self_attn = DraftAttention(config, 2 * hidden if first else hidden)
        self.post_attention_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.mlp = LlamaMLP(config.llama_config)

    def forward(self, hidden, embeds, rope, mask, math: DraftMath, past=None, cache=None, layer=0):
        if self.first:
            normed_hidden = self.hidden_norm(hidden)
            attn_in = torch.cat([self.input_layernorm(embeds), normed_hidden], dim=-1)
            residual = normed_hidden if math.norm_before_residual else hidden
        else:
            attn_in = self.input_layernorm(hidden)
            residual = hidden
        attended, new_kv = self.self_attn(attn_in, rope, mask, past, cache, layer, math.qk_norm)
        hidden = residual + attended
        hidden = hidden + self.mlp(self.post_attention_layernorm(hidden))
        return hidden, new_kv

    def lean(self, hidden, embeds, cos, signed_sin, mask, math: DraftMath, cache, layer):
        """`forward` without module calls (no `past`): the same operations on the same numbers."""
        if self.first:
            normed_hidden = rms_norm(self.hidden_norm, hidden)
            attn_in = torch.cat([rms_norm(self.input_layernorm, embeds), normed_hidden], dim=-1)
            residual = normed_hidden if math.norm_before_residual else hidden
        else:
            attn_in = rms_norm(self.input_layernorm, hidden)
            residual = hidden
        attended, new_kv = self.self_attn.lean(attn_in, cos, signed_sin, mask, cache, layer, math.qk_norm)
        hidden = residual + attended
        x = rms_norm(self.post_attention_layernorm, hidden)
        mlp = self.mlp
        hidden = hidden + linear(mlp.down_proj, mlp.act_fn(linear(mlp.gate_proj, x)) * linear(mlp.up_proj, x))
        return hidden, new_kv


def causal_mask(num_past: int, num_new: int, device) -> torch.Tensor:
    """New entry i (at index num_past + i) sees every past entry and new entries up to itself."""
    rows = torch.arange(num_new, device=device)[:, None] + num_past
    cols = torch.arange(num_past + num_new, device=device)[None, :]
    return cols <= rows


class Eagle3Draft(nn.Module):
    def __init__(self, config: DraftConfig, target_embedding: nn.Embedding):
        super().__init__()
        self.config = config
        target_width = 3 * config.target_hidden_size
        if config.fc_norm:
            self.fc_norm = nn.ModuleList(
                LlamaRMSNorm(config.target_hidden_size, eps=config.rms_norm_eps) for _ in range(3)
            )
        if config.norm_before_fc:
            self.input_norm = LlamaRMSNorm(target_width, eps=config.rms_norm_eps)
        self.fc = nn.Linear(target_width, config.hidden_size, bias=False)
        self.layers = nn.ModuleList(DraftLayer(config, first=i == 0) for i in range(config.num_layers))
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.draft_vocab_size, bias=False)
        # Not a child module: `.to(bfloat16)` must not round the RoPE frequencies.
        self.__dict__["rotary"] = LlamaRotaryEmbedding(config.llama_config)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.has_vocab_mapping = False
        # The target's embedding, shared and not registered as a child module so that the draft's
        # state_dict and .to() never touch the target's weights. A checkpoint's own embed_tokens is
        # kept as `own_embedding`; the reading decides which one a step uses.
        self.__dict__["shared_embedding"] = target_embedding
        self.own_embedding: nn.Embedding | None = None
        # The math when a caller names no reading: set by loading to the training reading.
        self.default_math = DraftMath(
            fc_norm=bool(config.fc_norm),
            norm_before_fc=bool(config.norm_before_fc),
            norm_before_lm_head=config.norm_output is not False,
            qk_norm=config.qk_norm,
        )

    def embed(self, token_ids: torch.Tensor, math: DraftMath) -> torch.Tensor:
        own = self.own_embedding is not None and (math.own_embedding or self.shared_embedding is None)
        return (self.own_embedding if own else self.shared_embedding)(token_ids)

    # -- the pieces of one step -------------------------------------------------------------------

    def fuse(self, target_features: torch.Tensor, math: DraftMath | None = None) -> torch.Tensor:
        """fc over the three concatenated target states [m, 3*Ht] -> [m, H]."""
        math = math or self.default_math
        if math.fc_norm:
            chunks = target_features.chunk(3, dim=-1)
            target_features = torch.cat([norm(c) for norm, c in zip(self.fc_norm, chunks, strict=True)], -1)
        if math.norm_before_fc:
            target_features = self.input_norm(target_features)
        return self.fc(target_features)

    def forward(
        self,
        hidden,
        token_ids,
        positions,
        cache: DraftKVCache | None = None,
        mask=None,
        past_override=None,
        math: DraftMath | None = None,
    ):
        """Run the draft over m positions: hidden [m, H] (`fuse`d target features, or the draft's own
        previous output), token_ids [m] (the tokens one ahead), positions [m] (RoPE positions).

        Returns the output hidden [m, H] (pre-norm) and each layer's new (keys, values).
        With a cache, attention covers the cached entries and the new ones are appended.
        `past_override` (per layer keys/values) and `mask` serve the teacher-forced TTT layout.
        """
        math = math or self.default_math
        embeds = self.embed(token_ids, math).to(hidden.dtype)
        if self.rotary.inv_freq.device != hidden.device:
            self.rotary.to(hidden.device)
        rope = self.rotary(hidden, positions[None])
        num_past = len(cache) if cache is not None else 0
        if mask is None and hidden.shape[0] > 1:  # one new query may attend to every entry
            mask = causal_mask(num_past, hidden.shape[0], hidden.device)
        new_kvs = []
        if past_override is None and not self._hooked():  # the same numbers without module calls
            cos, signed_sin = rope[0][0], signed(rope[1][0])
            for index, layer in enumerate(self.layers):
                hidden, new_kv = layer.lean(hidden, embeds, cos, signed_sin, mask, math, cache, index)
                new_kvs.append(new_kv)
            return hidden, new_kvs
        for index, layer in enumerate(self.layers):
            past = past_override[index] if past_override is not None else None
            hidden, new_kv = layer(hidden, embeds, rope, mask, math, past, cache, index)
            new_kvs.append(new_kv)
        return hidden, new_kvs

    def _hooked(self) -> bool:
        """Whether any hook would see the draft's submodules run (then they run as modules)."""
        from torch.nn.modules import module as torch_module

        if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
            return True
        modules = self.__dict__.get("_layer_modules")
        if modules is None:
            modules = self.__dict__["_layer_modules"] = list(self.layers.modules())
        return any(m._forward_hooks or m._forward_pre_hooks for m in modules)

    def logits(self, hidden: torch.Tensor, math: DraftMath | None = None) -> torch.Tensor:
        """Draft-vocab logits [m, Vd] in fp32."""
        if (math or self.default_math).norm_before_lm_head:
            hidden = rms_norm(self.norm, hidden)
        return linear(self.lm_head, hidden).float()

    def feedback(self, hidden: torch.Tensor, math: DraftMath | None = None) -> torch.Tensor:
        """What the next draft step is fed: the output hidden, or norm(out) under EAGLE 3.1 readings."""
        return self.norm(hidden) if (math or self.default_math).post_norm_feedback else hidden

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft-vocab index -> target id: d + d2t[d] (identity when the vocabularies are equal)."""
        if not self.has_vocab_mapping:
            return draft_ids
        return draft_ids + self.d2t[draft_ids]
