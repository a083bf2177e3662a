"""Train the demo target: a small Llama, from scratch, on standard-library source (fp32 on CPU;
bf16 autocast is ~40x slower on CPUs without native bf16)."""

from __future__ import annotations

import math
import time

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM


def target_config(vocab_size: int, eos_token_id: int, num_layers: int = 8, hidden: int = 192) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=512,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos_token_id,
        pad_token_id=eos_token_id,
    )


def cosine_lr(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_target(
    config: LlamaConfig,
    tokens: torch.Tensor,
    steps: int,
    batch: int,
    seq_len: int,
    seed: int,
    peak_lr: float = 2e-3,
    log=print,
) -> LlamaForCausalLM:
    """Next-token training on random windows of one long token stream; the last 2% is validation."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    split = int(len(tokens) * 0.98)
    train, valid = tokens[:split], tokens[split:]
    generator = torch.Generator().manual_seed(seed)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0}],
        lr=peak_lr,
        betas=(0.9, 0.95),
    )
    start = time.time()
    model.train()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, steps, peak_lr, warmup=max(1, steps // 25))
        offsets = torch.randint(0, len(train) - seq_len - 1, (batch,), generator=generator)
        window = torch.stack([train[o : o + seq_len] for o in offsets.tolist()])
        loss = model(input_ids=window, labels=window).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 25 == 0 or step == steps - 1:
            elapsed = time.time() - start
            rate = (step + 1) * batch * seq_len / elapsed
            log(
                f"target step {step + 1}/{steps}  loss {loss.item():.3f}  {rate:,.0f} tok/s  "
                f"eta {elapsed / (step + 1) * (steps - step - 1) / 60:.1f} min"
            )
    model.eval()
    log(f"target validation perplexity {validation_perplexity(model, valid, seq_len):.1f}")
    model.generation_config = GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.eos_token_id, do_sample=False
    )
    return model


@torch.no_grad()
def validation_perplexity(model: LlamaForCausalLM, valid: torch.Tensor, seq_len: int) -> float:
    windows = valid[: len(valid) // seq_len * seq_len].view(-1, seq_len)[:32]
    losses = [model(input_ids=w[None], labels=w[None]).loss.item() for w in windows]
    return math.exp(sum(losses) / max(1, len(losses)))
