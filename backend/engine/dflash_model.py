"""The DFlash draft's arithmetic (z-lab/dflash `dflash/model.py`: `DFlashDraftModel.forward`,
`Qwen3DFlashDecoderLayer`, `Qwen3DFlashAttention`), for the replay and for training.

- The target's states at the draft's layers, concatenated [m, n*Ht], are projected once per position:
  ctx = hidden_norm(fc(states)), shared by every layer and never changed by them.
- Each layer turns ctx into context keys and values with its own k_proj / v_proj, k_norm and RoPE at
  the positions' absolute positions: no input_layernorm on the context (`context`).
- A block [last token, mask x K] (the target's embeddings) at positions start..start+K runs through
  the layers: input_layernorm, q/k per-head RMSNorm (q_norm, k_norm), RoPE, attention over the context
  entries and the block's own entries both ways (no mask: `is_causal=False`), o_proj, residual,
  post_attention_layernorm, SwiGLU MLP, residual; then the final norm (`block`).
- The drafts are the target's LM head's argmax at block slots 1..K (slot k predicts the token at its
  own position: no shift). The block's own K/V are never kept: the context holds the positions before
  `start` only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from backend.drafts.dflash_config import DFlashConfig
from backend.engine.draft_model import attend, linear, rotate, signed
from backend.target.kv_cache import KVCache


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """transformers' Llama/Qwen3 RMSNorm: in fp32, the weight applied in the input's dtype."""
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class DFlashLayer(nn.Module):
    def __init__(self, config: DFlashConfig):
        super().__init__()
        hidden, d, eps, bias = config.hidden_size, config.head_dim, config.rms_norm_eps, config.attention_bias
        self.heads, self.kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, d
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = nn.Module()
        attn = self.self_attn
        attn.q_proj = nn.Linear(hidden, self.heads * d, bias=bias)
        attn.k_proj = nn.Linear(hidden, self.kv_heads * d, bias=bias)
        attn.v_proj = nn.Linear(hidden, self.kv_heads * d, bias=bias)
        attn.o_proj = nn.Linear(self.heads * d, hidden, bias=bias)
        attn.q_norm = RMSNorm(d, eps)
        attn.k_norm = RMSNorm(d, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(hidden, config.intermediate_size, bias=False)
        self.mlp.up_proj = nn.Linear(hidden, config.intermediate_size, bias=False)
        self.mlp.down_proj = nn.Linear(config.intermediate_size, hidden, bias=False)

    def keys_values(self, x, cos, signed_sin) -> tuple[torch.Tensor, torch.Tensor]:
        """x [m, H] -> keys (k_norm, RoPE) and values, each [kv_heads, m, d]."""
        m, attn = x.shape[0], self.self_attn
        k = attn.k_norm(linear(attn.k_proj, x).view(m, self.kv_heads, self.head_dim)).transpose(0, 1)
        v = linear(attn.v_proj, x).view(m, self.kv_heads, self.head_dim).transpose(0, 1)
        return rotate(k, cos, signed_sin), v

    def forward(self, hidden, cos, signed_sin, context: tuple[torch.Tensor, torch.Tensor], mask=None):
        """One layer over the block rows hidden [Q, H], attending to `context` (keys, values [kv, C, d])
        and to the block's own rows (mask [Q, C + Q] bool, True = attend; None: all)."""
        q_len, attn = hidden.shape[0], self.self_attn
        x = self.input_layernorm(hidden)
        q = attn.q_norm(linear(attn.q_proj, x).view(q_len, self.heads, self.head_dim)).transpose(0, 1)
        q = rotate(q, cos, signed_sin)
        k, v = self.keys_values(x, cos, signed_sin)
        keys, values = torch.cat([context[0], k], dim=1), torch.cat([context[1], v], dim=1)
        attended = attend(q, keys, values, mask, self.heads != self.kv_heads)
        hidden = hidden + linear(attn.o_proj, attended.transpose(0, 1).reshape(q_len, -1))
        x = self.post_attention_layernorm(hidden)
        mlp = self.mlp
        return hidden + linear(mlp.down_proj, F.silu(linear(mlp.gate_proj, x)) * linear(mlp.up_proj, x))


class DFlashDraft(nn.Module):
    """A DFlash draft beside its target: the target's embedding and LM head are shared, not registered
    (the draft's state_dict holds its own weights only, z-lab's names)."""

    def __init__(self, config: DFlashConfig, target_embedding: nn.Embedding, lm_head_weight: torch.Tensor):
        super().__init__()
        self.config = config
        self.path: str | None = None
        width = len(config.target_layer_ids) * config.hidden_size
        self.fc = nn.Linear(width, config.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.layers = nn.ModuleList(DFlashLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        d = config.head_dim
        inv_freq = 1.0 / (
            config.effective_rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d)
        )
        self.__dict__["inv_freq"] = inv_freq  # not a buffer: `.to(bfloat16)` must not round it
        self.__dict__["shared_embedding"] = target_embedding
        self.__dict__["lm_head_weight"] = lm_head_weight

    @property
    def mask_token_id(self) -> int:
        return self.config.mask_token_id

    def rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin [m, d] at `positions` (transformers' default RoPE, computed in fp32)."""
        freqs = positions.float()[:, None] * self.inv_freq.to(positions.device)[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        return angles.cos().to(dtype), signed(angles.sin().to(dtype))

    def context(
        self, states: torch.Tensor, positions: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, the context keys and values [kv, m, d] of positions whose target states are
        `states` [m, n*Ht] (fc, hidden_norm once; no input_layernorm)."""
        weight = self.fc.weight
        ctx = self.hidden_norm(linear(self.fc, states.to(weight.dtype)))
        cos, signed_sin = self.rope(positions, weight.dtype)
        return [layer.keys_values(ctx, cos, signed_sin) for layer in self.layers]

    def extend(self, cache: KVCache, states: torch.Tensor, positions: torch.Tensor) -> None:
        """Append the context entries of these positions to `cache` (entry i = position i)."""
        for index, (keys, values) in enumerate(self.context(states, positions)):
            cache.append(index, keys, values)

    def block(self, token_ids: torch.Tensor, positions: torch.Tensor, context, mask=None) -> torch.Tensor:
        """The block's normed output [Q, H]: token_ids [Q] at `positions` over `context` (per layer
        keys and values: `context` or a cache's views), mask [Q, C + Q] (None: every entry)."""
        weight = self.fc.weight
        hidden = self.shared_embedding(token_ids).to(weight.dtype)
        cos, signed_sin = self.rope(positions, weight.dtype)
        for layer, entries in zip(self.layers, context, strict=True):
            hidden = layer(hidden, cos, signed_sin, entries, mask)
        return self.norm(hidden)

    def cached(self, cache: KVCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The cache's context entries, per layer."""
        n = cache.length
        return [(cache.keys[i][..., :n, :], cache.values[i][..., :n, :]) for i in range(len(self.layers))]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's LM head over normed block rows: [Q, V] in fp32."""
        return (hidden @ self.lm_head_weight.to(hidden.dtype).T).float()
