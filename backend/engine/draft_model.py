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
        attended = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, enable_gqa=self.num_heads != self.num_kv_heads
        )
        return self.o_proj(attended.transpose(0, 1).reshape(m, -1)), (k, v)


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
        for index, layer in enumerate(self.layers):
            past = past_override[index] if past_override is not None else None
            hidden, new_kv = layer(hidden, embeds, rope, mask, math, past, cache, index)
            new_kvs.append(new_kv)
        return hidden, new_kvs

    def logits(self, hidden: torch.Tensor, math: DraftMath | None = None) -> torch.Tensor:
        """Draft-vocab logits [m, Vd] in fp32."""
        if (math or self.default_math).norm_before_lm_head:
            hidden = self.norm(hidden)
        return self.lm_head(hidden).float()

    def feedback(self, hidden: torch.Tensor, math: DraftMath | None = None) -> torch.Tensor:
        """What the next draft step is fed: the output hidden, or norm(out) under EAGLE 3.1 readings."""
        return self.norm(hidden) if (math or self.default_math).post_norm_feedback else hidden

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft-vocab index -> target id: d + d2t[d] (identity when the vocabularies are equal)."""
        if not self.has_vocab_mapping:
            return draft_ids
        return draft_ids + self.d2t[draft_ids]
