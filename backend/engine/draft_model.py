"""The EAGLE-3 draft network (docs/reference.md §3), written out so each step is visible.

One forward over m positions takes the hidden input `h` (fused target features, 3*Ht wide, or the
draft's own previous output, H wide), the embeddings of the tokens one ahead, and RoPE positions:

    g = fc(h)                          (only when h is 3*Ht wide; variants normalise h first)
    u = [input_layernorm(e), hidden_norm(g)]           embedding FIRST, 2H wide
    r = g + o_proj(attention(u))       (norm_before_residual: r = hidden_norm(g) + ...)
    out = r + mlp(post_attention_layernorm(r))         -> fed back as the next step's hidden
    logits = lm_head(norm(out))        over the draft vocab; target id = d + d2t[d]

Which variants apply, what is fed back (out, or norm(out) under EAGLE 3.1 readings) and whose
embedding `e` is come from a `DraftMath`: the reading of one engine (backend/drafts/readings.py).

There is one forward. Keys and values go through a cache object that appends them and returns every
entry attention sees: a `KVCache` for inference (the replay, trees), a `TTTCache` for the
teacher-forced TTT layout (backend/target/kv_cache.py). Below `Eagle3Draft` the layers run their
modules' arithmetic (`product`: `F.linear`, or weight @ x^T for a few rows; `F.rms_norm`; RoPE as one
roll) rather than calling each module, which is what makes a draft step cheap;
tests/engine/test_lean_target.py checks it against the modules called as modules (one row bit for
bit, a few rows within the last places). So a forward hook on a submodule of the draft (a layer, a
projection) does not run; one on the `Eagle3Draft` itself does. SpecLens registers none.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from backend.drafts.draft_config import DraftConfig
from backend.drafts.engine_readers import DraftMath
from backend.target.kv_cache import KVCache, TTTCache
from backend.target.product import product


def rms_norm(norm: LlamaRMSNorm, hidden: torch.Tensor) -> torch.Tensor:
    """`norm(hidden)`, as one call in fp32: `F.rms_norm` is composed of the same operations as
    LlamaRMSNorm there (pow, mean, add eps, rsqrt, two products), so every bit is the same."""
    if hidden.dtype == torch.float32 and norm.weight.dtype == torch.float32:
        return F.rms_norm(hidden, norm.weight.shape, norm.weight, norm.variance_epsilon)
    return norm(hidden)


def linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """`layer(x)`'s arithmetic: a few rows as weight @ x^T (backend/target/product.py)."""
    return product(x, layer.weight, layer.bias)


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
        cos,
        signed_sin,
        mask,
        cache: KVCache | TTTCache | list[KVCache] | None,
        layer: int,
        qk_norm: bool,
    ):
        """x [m, W] -> attention output [m, H]. This call's keys and values [kv_heads, m, d] are
        appended to `cache` first (None: attend to them alone; a list: the rows are sequences packed
        one after another, sequence s appended to cache[s] and attending to it alone, with mask[s]:
        the batched replay); mask [m, all keys] bool, True = attend, None = attend to all. q and k
        are rotated together; cos/signed_sin are [m, head_dim]."""
        m = x.shape[0]
        q = linear(self.q_proj, x).view(m, self.num_heads, self.head_dim)
        k = linear(self.k_proj, x).view(m, self.num_kv_heads, self.head_dim)
        if qk_norm:
            q, k = rms_norm(self.q_norm, q), rms_norm(self.k_norm, k)
        v = linear(self.v_proj, x).view(m, self.num_kv_heads, self.head_dim).transpose(0, 1)
        qk = rotate(torch.cat((q, k), dim=1).transpose(0, 1), cos, signed_sin)
        q, k = qk[: self.num_heads], qk[self.num_heads :]
        gqa = self.num_heads != self.num_kv_heads
        if isinstance(cache, list):
            attended, first = [], 0
            for sequence_cache, sequence_mask in zip(cache, mask, strict=True):
                last = first + (1 if sequence_mask is None else sequence_mask.shape[0])
                keys, values = sequence_cache.append(layer, k[:, first:last], v[:, first:last])
                attended.append(attend(q[:, first:last], keys, values, sequence_mask, gqa))
                first = last
            attended = torch.cat(attended, dim=1)
        else:
            keys, values = cache.append(layer, k, v) if cache is not None else (k, v)
            attended = attend(q, keys, values, mask, gqa)
        return linear(self.o_proj, attended.transpose(0, 1).reshape(m, -1))


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

    def forward(self, hidden, embeds, cos, signed_sin, mask, math: DraftMath, cache, layer):
        if self.first:
            normed_hidden = rms_norm(self.hidden_norm, hidden)
            attn_in = torch.cat([rms_norm(self.input_layernorm, embeds), normed_hidden], dim=-1)
            residual = normed_hidden if math.norm_before_residual else hidden
        else:
            attn_in = rms_norm(self.input_layernorm, hidden)
            residual = hidden
        attention = self.self_attn.forward  # the arithmetic, not the module call (module docstring)
        attended = attention(attn_in, cos, signed_sin, mask, cache, layer, math.qk_norm)
        hidden = residual + attended
        x = rms_norm(self.post_attention_layernorm, hidden)
        mlp = self.mlp
        hidden = hidden + linear(mlp.down_proj, mlp.act_fn(linear(mlp.gate_proj, x)) * linear(mlp.up_proj, x))
        return hidden


def causal_mask(num_past: int, num_new: int, device) -> torch.Tensor:
    """New entry i (at index num_past + i) sees every past entry and new entries up to itself."""
    rows = torch.arange(num_new, device=device)[:, None] + num_past
    cols = torch.arange(num_past + num_new, device=device)[None, :]
    return cols <= rows


class Eagle3Draft(nn.Module):
    def __init__(self, config: DraftConfig, target_embedding: nn.Embedding):
        super().__init__()
        self.config = config
        self.path: str | None = None  # the folder it was loaded from (loading.build_draft)
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
        cache: KVCache | TTTCache | list[KVCache] | None = None,
        mask=None,
        math: DraftMath | None = None,
        lengths: list[int] | None = None,
    ):
        """Run the draft over m positions: hidden [m, H] (`fuse`d target features, or the draft's own
        previous output), token_ids [m] (the tokens one ahead), positions [m] (RoPE positions).

        Returns the output hidden [m, H] (pre-norm).
        With a cache, attention covers the cached entries and the new ones are appended (None:
        the m new entries alone; a list of caches: sequences packed one after another, lengths[s]
        rows of sequence s on cache[s], causal over it; one row each when `lengths` is None).
        `mask` [m, all keys] bool (None: causal over the cache and the new entries); the TTT layout
        and the trees pass their own.
        """
        math = math or self.default_math
        embeds = self.embed(token_ids, math).to(hidden.dtype)
        if self.rotary.inv_freq.device != hidden.device:
            self.rotary.to(hidden.device)
        cos, sin = self.rotary(hidden, positions[None])
        cos, signed_sin = cos[0], signed(sin[0])
        if isinstance(cache, list):  # each sequence causal over its own cache; one row sees it all
            mask = [
                None if length == 1 else causal_mask(c.length, length, hidden.device)
                for c, length in zip(cache, lengths or [1] * len(cache), strict=True)
            ]
        elif mask is None and hidden.shape[0] > 1:  # one new query sees every entry
            num_past = cache.length if isinstance(cache, KVCache | TTTCache) else 0
            mask = causal_mask(num_past, hidden.shape[0], hidden.device)
        for index, layer in enumerate(self.layers):
            hidden = layer.forward(hidden, embeds, cos, signed_sin, mask, math, cache, index)
        return hidden

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
