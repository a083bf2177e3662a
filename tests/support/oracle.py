"""A slow, cache-free reference of greedy chain speculative decoding, for checking the replay.

Every draft and target forward recomputes the whole sequence from scratch, so nothing here depends
on KV caches, cache cropping or the draft's catch-up bookkeeping that the replay uses.
"""

from __future__ import annotations

import torch

from backend.engine.capture import AuxCapture
from backend.engine.replay import accepted_prefix_length


@torch.inference_mode()
def plain_greedy(target, prompt: list[int], max_new_tokens: int) -> list[int]:
    """The target's own greedy output through transformers' `generate`: what a replay must equal."""
    out = target.model.generate(
        torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0
    )
    return out[0, len(prompt) :].tolist()


@torch.inference_mode()
def oracle_replay(target, draft, prompt: list[int], wiring, num_steps: int, max_new_tokens: int):
    """Returns (output_ids, [(drafted_ids, accepted_count), ...])."""
    eos = set(target.eos_token_ids)

    def full(tokens):
        with AuxCapture(target.model, wiring.aux_hf_indices) as capture:
            logits = target.model(input_ids=torch.tensor([tokens])).logits[0]
            return logits, capture.features()

    logits, _ = full(prompt)
    tokens = list(prompt) + [int(logits[-1].argmax())]
    output, steps = [tokens[-1]], []
    while output[-1] not in eos and len(output) < max_new_tokens:
        n = len(tokens) - 1  # the pending token's position
        _, features = full(tokens[:n])
        prefix_hidden = draft.fuse(features)
        prefix_tokens = tokens[1 : n + 1]
        chain_hidden, chain_tokens, drafted = [], [], []
        hidden_in, tokens_in = prefix_hidden, prefix_tokens
        for _ in range(num_steps):
            out, _ = draft(hidden_in, torch.tensor(tokens_in), torch.arange(len(tokens_in)))
            last = out[-1:]
            drafted.append(int(draft.to_target_ids(draft.logits(last)[-1].argmax())))
            chain_hidden.append(last)
            chain_tokens.append(drafted[-1])
            hidden_in = torch.cat([prefix_hidden, *chain_hidden])
            tokens_in = prefix_tokens + chain_tokens
        verify_logits, _ = full(tokens + drafted)
        argmax = verify_logits[n : n + num_steps + 1].argmax(-1).tolist()
        accepted = accepted_prefix_length(drafted, argmax)
        steps.append((drafted, accepted))
        for token in drafted[:accepted] + [argmax[accepted]]:
            tokens.append(token)
            output.append(token)
            if token in eos or len(output) >= max_new_tokens:
                break
    return output, steps
