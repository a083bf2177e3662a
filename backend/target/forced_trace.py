"""A forced trace: the target over a continuation it did not choose (an engine's sampled output), as a
trace (trace.py) whose every row names that continuation's next token as the one a greedy replay takes.

Why this reproduces a sampled engine step for step: the engines draft greedily whatever the temperature
(vLLM 0.32: v1/spec_decode/llm_base_proposer.py `_sample_draft_tokens` takes the argmax and passes no
draft probabilities unless the speculative config sets draft_sample_method "probabilistic", its default
"greedy"; llama.cpp 11434, common/speculative.cpp: the DFlash drafter reads each block slot's argmax and
fills no draft distribution, the EAGLE-3 one takes its argmax unless `--spec-draft-sampling
probabilistic`), and both engines' sampled verify keep a draft exactly when the token they emit at its
position is that draft: llama.cpp, given no draft distribution (tools/server/server-context.cpp: rejection
needs `spec_draft_q`), samples the target and accepts while the sample equals the draft (common/sampling.cpp
`common_sampler_sample_and_accept_n`); vLLM with no draft probabilities accepts draft d when a uniform
draw is below p(d), else emits a token drawn from p with d masked out (v1/sample/rejection_sampler.py,
`rejection_random_sample_kernel` and `sample_recovered_tokens_kernel`), so a rejected draft is never
emitted. Given the emitted tokens, each step's accepted count is the length of the drafts' agreement with
them: a greedy replay over this trace, the draft fed the target's states along the engine's own path.
What it does not test is the sampling itself (the engines' random draws); an engine that samples its
drafts (vLLM's draft_sample_method "probabilistic", llama.cpp's `--spec-draft-sampling probabilistic`) is
not reproduced this way."""

from __future__ import annotations

import torch

from backend.target.target_runner import row_stats
from backend.target.trace import TOP, Trace


@torch.inference_mode()
def forced_trace(target, prompt: list[int], tokens: list[int], indices, source: str) -> Trace:
    """The trace of `prompt` followed by `tokens` (at least one), with the states at HF `indices`: one
    forward of `target` (a loaded target) over both. Row p keeps the target's real log-probability of the
    forced next token in its first column and -inf in the others, so the forced token is the row's only
    finite entry (what a greedy verify takes) and the probability recorded is the target's own."""
    indices = sorted(set(indices))
    runner = target.runner
    sequence = list(prompt) + list(tokens)
    output = runner.forward_many([sequence[:-1]], [runner.new_cache()], [0], indices)[0]
    rows = output.logits[0, len(prompt) - 1 :].float().cpu()  # row j predicts tokens[j]
    logprobs = torch.log_softmax(rows, dim=-1)
    forced = torch.tensor(tokens).unsqueeze(1)
    others = logprobs.scatter(1, forced, -torch.inf).topk(min(TOP, rows.shape[-1]) - 1, dim=-1).indices
    top_ids = torch.cat([forced, others], dim=1)  # the forced id once (a scatter keeps one of two)
    top_logprobs = torch.full(top_ids.shape, -torch.inf)
    top_logprobs[:, 0] = logprobs.gather(1, forced).squeeze(1)
    stats = row_stats(rows)
    prompt_rows = len(prompt) - 1

    def pad(values: torch.Tensor, fill) -> torch.Tensor:
        return torch.cat([torch.full((prompt_rows, *values.shape[1:]), fill, dtype=values.dtype), values])

    return Trace(
        list(prompt),
        list(tokens),
        {i: output.states[i].float().cpu() for i in indices},
        pad(top_ids, -1),
        pad(top_logprobs, -torch.inf),
        pad(torch.tensor(stats.entropies), float("nan")),
        pad(torch.tensor(stats.near_tie), False),
        len(tokens),
        source,
    )
