"""Train the demo target: a small Llama, from scratch, on standard-library source (fp32 on CPU;
bf16 autocast is ~40x slower on CPUs without native bf16)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM


def target_config(
    vocab_size: int, eos_token_id: int, num_layers: int = 12, hidden: int = 160, intermediate: int = 448
) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
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


def update_weights(model, optimizer, loss: torch.Tensor) -> None:
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def watch(model, monitor, every: int, done: int, total: int, log, label: str) -> None:
    """Log monitor(model) (eval mode, no grad) after every `every` of `total` updates, but the last."""
    if monitor is None or done % every or done >= total:
        return
    model.eval()
    with torch.no_grad():
        log(f"{label} {done}: {monitor(model)}")
    model.train()


def cosine_lr(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@dataclass(frozen=True)
class Schedule:
    """One training stage: its updates, sequences per update and their length, the random seed, the peak
    learning rate, and how often `Watch.monitor` runs."""

    steps: int
    batch: int
    seq_len: int
    seed: int
    lr: float
    monitor_every: int


@dataclass(frozen=True)
class Watch:
    """Where a stage reports: `log` lines, and `monitor(model)` (eval mode, no grad), a line to log
    every Schedule.monitor_every updates."""

    log: Callable = print
    monitor: Callable | None = None


def train_target(
    config: LlamaConfig, tokens: torch.Tensor, schedule: Schedule, watching: Watch | None = None
) -> LlamaForCausalLM:
    """Next-token training on random windows of one long token stream; the last 2% is validation."""
    watching = watching or Watch()
    steps, batch, seq_len, seed = schedule.steps, schedule.batch, schedule.seq_len, schedule.seed
    peak_lr, log, monitor, monitor_every = schedule.lr, watching.log, watching.monitor, schedule.monitor_every
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
        update_weights(model, optimizer, loss)
        if step % 25 == 0 or step == steps - 1:
            elapsed = time.time() - start
            rate = (step + 1) * batch * seq_len / elapsed
            log(
                f"target step {step + 1}/{steps}  loss {loss.item():.3f}  {rate:,.0f} tok/s  "
                f"eta {elapsed / (step + 1) * (steps - step - 1) / 60:.1f} min"
            )
        watch(model, monitor, monitor_every, step + 1, steps, log, "target step")
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


def repeated_positions(ids: list[int], start: int, n: int = 4) -> list[int]:
    """Positions t >= start whose token completes an n-gram seen earlier in `ids` (every token of such
    an n-gram is marked, as in sequence-level unlikelihood training)."""
    seen: set[tuple[int, ...]] = set()
    marked: set[int] = set()
    for end in range(n, len(ids) + 1):
        gram = tuple(ids[end - n : end])
        if gram in seen and end - 1 >= start:
            marked.update(range(max(start, end - n), end))
        seen.add(gram)
    return sorted(marked)


def unlikelihood_finetune(
    model: LlamaForCausalLM,
    tokens: torch.Tensor,
    schedule: Schedule,
    watching: Watch | None = None,
    prompt_len: int = 64,
    continuation: int = 96,
) -> LlamaForCausalLM:
    """Sequence-level unlikelihood fine-tuning (Welleck et al. 2019, "Neural Text Generation with
    Unlikelihood Training", §5.2): the model continues training windows greedily; every token of a
    4-gram its own continuation repeats gets the loss -log(1 - p(token)); alternate updates are plain
    next-token training on the corpus so the language model is kept. A target trained only by
    likelihood loops under greedy decoding (its outputs repeat most 4-grams); this teaches it not to."""
    watching = watching or Watch()
    updates, batch, seq_len, seed = schedule.steps, schedule.batch, schedule.seq_len, schedule.seed
    lr, log, monitor, monitor_every = schedule.lr, watching.log, watching.monitor, schedule.monitor_every
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    split = int(len(tokens) * 0.98)
    train = tokens[:split]
    start = time.time()
    for update in range(updates):
        for group in optimizer.param_groups:  # decays to lr/10: the last updates settle, not bounce
            group["lr"] = cosine_lr(update, updates, lr, warmup=max(1, updates // 20))
        if update % 2 == 0:
            model.eval()
            offsets = torch.randint(0, len(train) - prompt_len - 1, (batch,), generator=generator)
            prompts = torch.stack([train[o : o + prompt_len] for o in offsets.tolist()])
            with torch.no_grad():
                out = model.generate(
                    input_ids=prompts,
                    attention_mask=torch.ones_like(prompts),
                    do_sample=False,
                    max_new_tokens=continuation,
                    min_new_tokens=continuation,
                    pad_token_id=model.config.eos_token_id,
                )
            model.train()
            rows = out.tolist()
            mask = torch.zeros(out.shape, dtype=torch.bool)
            for row, ids in enumerate(rows):
                for t in repeated_positions(ids, prompt_len):
                    mask[row, t] = True
            logits = model(input_ids=out).logits[:, :-1]
            probs = torch.softmax(logits.float(), dim=-1).gather(-1, out[:, 1:, None])[..., 0]
            marked = mask[:, 1:]
            if not marked.any():
                continue
            loss = -torch.log((1 - probs[marked]).clamp(min=1e-5)).mean()
            kind = (
                f"unlikelihood over {int(marked.sum())} repeated tokens ({float(marked.float().mean()):.2f})"
            )
        else:
            offsets = torch.randint(0, len(train) - seq_len - 1, (batch,), generator=generator)
            window = torch.stack([train[o : o + seq_len] for o in offsets.tolist()])
            loss = model(input_ids=window, labels=window).loss
            kind = "likelihood"
        update_weights(model, optimizer, loss)
        if update % 10 == 0 or update == updates - 1:
            log(
                f"unlikelihood update {update + 1}/{updates}  {kind} loss {loss.item():.3f}  "
                f"{(time.time() - start) / 60:.1f} min"
            )
        watch(model, monitor, monitor_every, update + 1, updates, log, "unlikelihood update")
    model.eval()
    log(
        f"target validation perplexity after unlikelihood training {validation_perplexity(model, tokens[split:], seq_len):.1f}"
    )
    return model
