"""Temperature sampling in a speculative replay: the target's distribution and each engine's
acceptance rule (docs/reference.md §12).

Both engines draft greedily even when a request samples, and neither uses the draft's probabilities
to accept: a drafted token x at a node whose target distribution is p is accepted with probability
p(x) (a one-hot draft), and on rejection the token is drawn from p with the rejected tokens removed.
So both emit exactly the target's sampling distribution. They differ in the random draws and in
SGLang's two lossy thresholds:

- SGLang, `tree_speculative_sampling_target_only` (sgl-kernel/csrc/speculative/speculative_sampling.cuh),
  called from `EagleVerifyInput.verify` (python/sglang/srt/speculative/eagle_info.py): one coin per
  tree node; the children of the last accepted node are tried in sibling order, accumulating their
  target probabilities, and child i is accepted when coin <= prob_acc / threshold_acc or
  p(x_i) >= threshold_single. A rejected child's probability is moved into the draft row so that the
  final token is drawn from relu(p - q), with one more coin, by inverse CDF.
- vLLM, `rejection_random_sample_kernel` (vllm/v1/sample/rejection_sampler.py) with
  draft_probs = None: one uniform per position, accept while p(d_i) >= u_i; the recovered token is
  argmax(p' / e) with e ~ Exp(1) (p' = p without d_i); the bonus token comes from the ordinary
  sampler. Chains only: vLLM's verification is not tree-aware.

SpecLens draws every random number from one CPU `torch.Generator` seeded with the run's seed, in a
fixed order per step, so a run replays bit for bit; the engines' own random streams (per-request GPU
generators) are not reproduced, only their rules.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.target.target_runner import near_ties

SAMPLING_RULES = ("sglang", "vllm")


@dataclass(frozen=True)
class Sampling:
    """A request's sampling parameters. temperature 0 is greedy (argmax, no random draws)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: every token
    seed: int = 0
    rule: str = "sglang"  # whose acceptance rule: sglang | vllm
    threshold_single: float = 1.0  # SGLang --speculative-accept-threshold-single
    threshold_acc: float = 1.0  # SGLang --speculative-accept-threshold-acc

    def __post_init__(self):
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be >= 1 (or 0 / -1 for all), got {self.top_k}")
        if self.rule not in SAMPLING_RULES:
            raise ValueError(f"unknown acceptance rule {self.rule!r}; use {' or '.join(SAMPLING_RULES)}")
        if not (0 < self.threshold_single <= 1 and 0 < self.threshold_acc <= 1):
            raise ValueError("SGLang's accept thresholds must be in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def label(self) -> str:
        if self.greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        if self.top_p < 1:
            parts.append(f"top_p={self.top_p:g}")
        if self.top_k > 0:
            parts.append(f"top_k={self.top_k}")
        return "sampled " + " ".join(parts) + f" seed={self.seed}"


GREEDY = Sampling()


def target_distribution(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Rows of sampling probabilities [T, V] in fp32: softmax(logits / T), then top-k, then top-p,
    each renormalised (SGLang: softmax, `top_k_renorm_prob`, `top_p_renorm_prob` in
    EagleVerifyInput.verify; vLLM: temperature, `apply_top_k_top_p`, softmax in
    RejectionSampler.forward; the kept sets are the same). Greedy: one-hot at the argmax."""
    logits = logits.float()
    if sampling.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    probs = torch.softmax(logits / sampling.temperature, dim=-1)
    if 0 < sampling.top_k < probs.shape[-1]:
        kth = probs.topk(sampling.top_k, dim=-1).values[..., -1:]
        probs = torch.where(probs >= kth, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    if sampling.top_p < 1:
        ordered, order = probs.sort(dim=-1, descending=True)
        before = ordered.cumsum(-1) - ordered  # mass of the tokens ranked above each one
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < sampling.top_p)
        probs = torch.where(keep, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def row_entropies(probs: torch.Tensor) -> list[float]:
    """The entropy in nats of each row of a [rows, V] probability matrix (the target's uncertainty at
    each verify row: where acceptance is lost splits by it)."""
    return (-(probs * probs.clamp_min(1e-30).log()).sum(-1)).tolist()


def near_tie_rows(logits: torch.Tensor, rows: int) -> list[int]:
    """The first `rows` rows of [R, V] logits whose top two lie within NEAR_TIE of the row's largest
    magnitude: a product summed in another order (a batch of samples, transformers' forward against
    the lean one, an engine's kernels, a verify chunk against one-token decodes) may take the other
    token there (docs/reference.md §7)."""
    if not rows:
        return []
    return torch.nonzero(near_ties(logits[:rows])).flatten().tolist()


def inverse_cdf(probs: torch.Tensor, coin: float) -> int:
    """The token whose cumulative-probability interval holds coin * total (SGLang's final
    sampling draws from relu(p - q) this way)."""
    cumulative = probs.double().cumsum(-1)
    index = int(torch.searchsorted(cumulative, coin * float(cumulative[-1])))
    index = min(index, probs.shape[-1] - 1)
    while probs[index] <= 0 and index > 0:  # a coin on a zero-width boundary: the token before it
        index -= 1
    return index


def exponential_race(probs: torch.Tensor, generator: torch.Generator) -> int:
    """argmax(p / e), e ~ Exp(1): a draw from p (vLLM's `sample_recovered_tokens` and sampler)."""
    noise = torch.empty(probs.shape, dtype=torch.float64).exponential_(generator=generator)
    return int((probs.double() / noise).argmax())


def sibling_accept_probability(sibling_probs: list[float], index: int, sampling: Sampling) -> float:
    """P(sibling `index` is accepted | its parent was), under SGLang's rule: siblings are tried in
    order with one coin, accumulating target probability (thresholds 1: exactly p(x_index))."""
    acc, single = sampling.threshold_acc, sampling.threshold_single
    if any(p >= single for p in sibling_probs[:index]):
        return 0.0
    before = min(1.0, sum(sibling_probs[:index]) / acc)
    if sibling_probs[index] >= single:
        return max(0.0, 1.0 - before)
    through = min(1.0, sum(sibling_probs[: index + 1]) / acc)
    return max(0.0, through - before)
