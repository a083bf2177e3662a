"""Acceptance metrics of a replay, each with the definition it is computed by.

Engines disagree on names (docs/reference.md §6); every number SpecLens shows carries one of
the DEFINITIONS below so that it can be compared with the right figure from SGLang, vLLM or SpecForge.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from backend.plain import Plain

if TYPE_CHECKING:
    from backend.run.records import StepRecord

NEAR_TIE = 1e-4  # a verify row whose top two logits lie within this share of its largest magnitude

DEFINITIONS = {
    "mean_accept_length": "accept length (tau): mean over verify steps of a + 1, bonus token included "
    "(SGLang accept len, vLLM mean_acceptance_length, EAGLE papers)",
    "accepted_drafts_per_step": "mean of a, drafts accepted per verify step (SpecForge simulated_acc_len "
    "is comparable to this)",
    "acceptance_rate": "accepted drafts / drafted tokens = sum(a) / (steps x K) (vLLM); for a tree, K is its "
    "depth (num_steps), not the num_draft_tokens - 1 nodes verified; where a step drafts fewer than K "
    "(llama.cpp near the end), the tokens it drafted (llama.cpp's draft_n_accepted / draft_n)",
    "expected_accept_length": "mean over verify steps of 1 + E[a]: E[a] sums, over the step's drafted nodes, "
    "the product along the node's path of P(accepted | parent accepted) (sampled: the acceptance rule's "
    "probability from the target's distribution; greedy: 1 if the node is the target's argmax, else 0)",
    "per_position_marginal": "P(a >= i) over verify steps, i = 1..K (vLLM per-position vector)",
    "per_position_conditional": "P(a >= i | a >= i-1), i = 1..K (EAGLE n-alpha style); null where no "
    "step reached position i-1",
    "accept_histogram": "number of verify steps accepting exactly a = 0..K drafts (SGLang spec_accept_histogram)",
    "acc_per_step": "teacher-forced acc_k: fraction of loss-masked positions where the draft's top-1 at TTT "
    "step k, mapped through d2t, equals the target's argmax (SpecForge acc_k)",
    "simulated_accept_length": "sum_k prod_{j<=k} acc_j over the teacher-forced accuracies; excludes the "
    "bonus token (SpecForge checkpoint selection)",
    "mean_ci95": "95% confidence interval of a mean over prompts (or samples, requests): mean +- t(0.975, "
    "n-1) x s / sqrt(n), s the sample standard deviation; accept length varies about +-50% between prompts, "
    "so two means closer than their intervals allow are not told apart; the interval of a probability is cut "
    "at 0 and 1",
    "self_disagreement_per_1000": "positions per 1,000 where the target's argmax over a (K+1)-token verify "
    "forward differs from its argmax over 1-token decodes of the same prefix, in the run's dtype (measured "
    "for non-fp32 runs: where the replay may legitimately leave plain greedy decoding)",
    # Over several requests or runs (served numbers, evaluate, Compare)
    "pooled_accept_length": "pooled accept length: total (a + 1) over all verify steps of all requests (or "
    "runs) / total verify steps (step-weighted; a long request weighs more)",
    "mean_accept_length_over_prompts": "mean over requests (or runs, one a prompt) with a verify step of "
    "each one's accept length (a short one weighs as much as a long one); those without a step are left out",
    "tokens_per_s": "output tokens / decode time (draft + verify, prefill excluded), summed over runs (a "
    "batched run's times are its share of the batch's forwards, so a batch's runs sum to its wall time)",
    # What a server's own aggregate number means, by where it was read (observe)
    "sglang_log_accept_length": "accept length = mean of the logged `accept len` values (SGLang logs, per "
    "decode-log interval, accepted tokens per verify step including the bonus)",
    "vllm_metrics_accept_length": "accept length = 1 + accepted tokens / drafts (vLLM mean acceptance "
    "length, bonus included); per-position = accepted tokens at position i / drafts (P(a > i), marginal)",
    "vllm_v0_metrics_accept_length": "accept length = emitted tokens / verify steps, verify steps = draft "
    "tokens / K (needs K; vLLM V0 exposes no draft count)",
    # Where acceptance is lost over stored runs (backend/diagnostics/where_lost.py)
    "lost_attempt": "an attempt is draft position j of a verify step whose drafts 1..j-1 were accepted (the target "
    "judged d_j): a step accepting a of K drafts makes min(a + 1, K) attempts",
    "lost_position_marginal": "P(a >= i): share of verify steps accepting at least i drafts; mean over samples (runs) "
    "with its 95% interval over samples (mean_ci95), and pooled over steps",
    "lost_position_conditional": "P(a >= i | a >= i-1): of the steps that reached position i, the share accepting it "
    "(pooled over steps)",
    "lost_group_rate": "accepted attempts / attempts in the group, with a 95% Wilson interval over attempts (attempts "
    "of one sample are not independent: read it as a lower bound on the uncertainty); share = the group's "
    "attempts / all attempts; fewer than 20 attempts (where_lost.MIN_ATTEMPTS): too few to judge",
    "lost_token_kind": "the kind of the target's token at the attempt (the accepted draft, or the target's own token "
    "where it rejected), from its text: special (the tokenizer's special tokens), whitespace / indentation, "
    "digits, punctuation, words / identifiers (letters, digits, underscore), mixed",
    "lost_target_confidence": "the target's probability of its own greedy token at the attempt's position (the verify "
    "forward's top-1 probability), in tiers",
    "lost_target_entropy": "the entropy (nats, temperature 1) of the target's distribution at the attempt's position, "
    "from the verify forward, in tiers: low < 0.5 (one token all but certain), medium 0.5-2, high >= 2. speculators "
    "splits acceptance by prompt sets chosen for high entropy (throughput_1k/high_entropy); SpecLens splits each "
    "position by the target's own entropy there, so the tiers are its own, not speculators'",
    "lost_context_length": "tokens before the attempt's position (prompt + output so far), in buckets",
    "lost_source": "the sample's `source` field up to its first '/' (HumanEval/3 and HumanEval/7 are HumanEval: the "
    "dataset, not the item); a typed prompt: 'typed prompt'",
    "lost_span": "thinking: after a <think> and before its </think> in the output; answer: elsewhere "
    "(only where the outputs hold a thinking span)",
    "lost_block": "code: inside a fenced block (``` ... ```) of the output; prose: outside one (only where the outputs "
    "hold a fenced block), read from the output itself whatever the sample's source",
    "lost_calibration": "greedy chains only: the draft's probability of each attempted draft (its softmax at that "
    "draft step) in 10 "
    "equal bins, against the share of those attempts the target accepted",
    "lost_brier": "Brier score: the mean over attempts of (draft probability - accepted)^2, accepted 1 or 0; 0 is "
    "perfect, 0.25 what a constant 0.5 scores (DeepSpec's evaluator reports it beside the ECE)",
    "lost_auroc": "area under the ROC curve of the draft probability as a predictor of acceptance: the chance that "
    "an accepted attempt has a higher draft probability than a rejected one (ties count half); 0.5 is no "
    "better than chance, 1 separates them perfectly; empty without both accepted and rejected attempts",
    "lost_ece": "expected calibration error: sum over bins of (attempts in bin / attempts) x |acceptance - mean draft "
    "probability|; 0 = the draft's probability is the acceptance rate",
    "lost_top_rejected": "the target tokens whose draft was rejected most often (a draft attempt at a position "
    "where the target emitted that token, not accepted), with their count and the first steps (run, step index)",
    "lost_runs": "the stored runs the numbers are over, written as `lost --runs` takes them (3-5,9)",
    "lost_threshold_whatif": "WHAT-IF from the stored steps, greedy chains only: each step drafts until the first "
    "draft whose probability is below the threshold (at least one draft), so it accepts min(a, drafts kept); "
    "later steps are assumed unchanged (in a real run a shorter step moves every later step); predicted "
    "speed-up over the target alone = accept length x t_verify / (drafts per step x t_draft_per_token + "
    "t_verify), with the runs' measured mean verify time per step and draft time per drafted token (the "
    "Speed-up what-if's model: a verify costs the same whatever its length, as on a memory-bound GPU; on a "
    "CPU a longer verify costs more; a DFlash block costs its one forward however many drafts are kept); "
    "the best threshold is the highest predicted speed-up",
}


@dataclass(frozen=True)
class RunMetrics(Plain):
    """A replay's metrics (a run's metrics column; each named in DEFINITIONS). None where a run has
    none (no verify step, an older run, a greedy run's expected accept length)."""

    num_steps: int | None = None  # K
    verify_steps: int | None = None
    mean_accept_length: float | None = None
    accepted_drafts_per_step: float | None = None
    acceptance_rate: float | None = None
    per_position_marginal: tuple[float | None, ...] = ()
    per_position_conditional: tuple[float | None, ...] = ()
    accept_histogram: tuple[int, ...] = ()
    expected_accept_length: float | None = None  # sampled runs
    self_disagreement_per_1000: float | None = None  # runs off fp32
    batch_size: int | None = None  # replayed with this many samples in one batch (evaluate, Compare)
    near_ties: tuple[int, ...] = ()  # positions whose token a near-tie of the verify logits chose
    draft_ms_total: float = 0.0
    verify_ms_total: float = 0.0


LOST_TERMS = (
    "attempt",
    "position_marginal",
    "position_conditional",
    "group_rate",
    "token_kind",
    "target_confidence",
    "target_entropy",
    "context_length",
    "source",
    "span",
    "block",
    "calibration",
    "ece",
    "brier",
    "auroc",
    "threshold_whatif",
    "top_rejected",
    "runs",
)


def definitions(names: dict[str, str] | tuple[str, ...]) -> dict[str, str]:
    """The definitions an output carries, from the one DEFINITIONS: a tuple of keys, or {the output's
    key: the DEFINITIONS key} where an output names a number its own way."""
    pairs = names.items() if isinstance(names, dict) else ((name, name) for name in names)
    return {key: DEFINITIONS[name] for key, name in pairs}


def position_rates(histogram: list[int], positions: int) -> tuple[list, list]:
    """(per_position_marginal, per_position_conditional) for positions 1..`positions` from an accept
    histogram (entry a = verify steps accepting exactly a drafts): the one computation of both, for a
    replay's steps, a server's histogram and the what-if alike. None where nothing was reached."""
    steps = sum(histogram)
    padded = list(histogram) + [0] * max(0, positions + 1 - len(histogram))
    reached = [sum(padded[i:]) for i in range(positions + 1)]  # reached[0] = steps
    marginal = [reached[i] / steps if steps else None for i in range(1, positions + 1)]
    conditional = [reached[i] / reached[i - 1] if reached[i - 1] else None for i in range(1, positions + 1)]
    return marginal, conditional


def drafted_position_rates(accepted: list[int], drafted: list[int], positions: int) -> tuple[list, list]:
    """position_rates where steps drafted different counts: P(a >= i) over the steps that drafted position
    i, and P(a >= i | a >= i-1) over those of them that reached i-1. None where no step qualifies."""
    marginal, conditional = [], []
    for i in range(1, positions + 1):
        drafted_i = [a for a, d in zip(accepted, drafted, strict=True) if d >= i]
        reached = [a for a in drafted_i if a >= i - 1]
        marginal.append(sum(a >= i for a in drafted_i) / len(drafted_i) if drafted_i else None)
        conditional.append(sum(a >= i for a in reached) / len(reached) if reached else None)
    return marginal, conditional


def accept_histogram(accepted_counts: list[int], num_steps: int) -> list[int]:
    """Verify steps accepting exactly a = 0..K drafts; ValueError for a count outside 0..K."""
    if any(not 0 <= a <= num_steps for a in accepted_counts):
        raise ValueError(f"accepted counts must lie in 0..{num_steps}: {accepted_counts}")
    return [sum(1 for a in accepted_counts if a == k) for k in range(num_steps + 1)]


def acceptance_metrics(
    accepted_counts: list[int], num_steps: int, drafted: list[int] | None = None
) -> RunMetrics:
    """Metrics from the accepted count a of each verify step (0 <= a <= K). `drafted`: how many tokens
    each step drafted, where a reading drafts fewer than K near the end (llama.cpp); then the rate is
    over the drafted tokens and position i counts only the steps that drafted it."""
    histogram = accept_histogram(accepted_counts, num_steps)
    marginal, conditional = position_rates(histogram, num_steps)
    if drafted is not None and any(d < num_steps for d in drafted):
        marginal, conditional = drafted_position_rates(accepted_counts, drafted, num_steps)
    steps = len(accepted_counts)
    if steps == 0:
        return RunMetrics(
            num_steps, 0, None, None, None, tuple(marginal), tuple(conditional), tuple(histogram)
        )
    total = sum(accepted_counts)
    return RunMetrics(
        num_steps=num_steps,
        verify_steps=steps,
        mean_accept_length=total / steps + 1.0,
        accepted_drafts_per_step=total / steps,
        acceptance_rate=total / (sum(drafted) if drafted is not None else steps * num_steps),
        per_position_marginal=tuple(marginal),
        per_position_conditional=tuple(conditional),
        accept_histogram=tuple(histogram),
    )


def expected_accept_length(expected_accepted: list[float]) -> float | None:
    """Mean of 1 + E[a] over verify steps (each step's E[a] is recorded in its tree)."""
    return 1.0 + sum(expected_accepted) / len(expected_accepted) if expected_accepted else None


def simulated_accept_length(acc_per_step: list[float]) -> float:
    """sum_k prod_{j<=k} acc_j (SpecForge); excludes the bonus token."""
    total, running = 0.0, 1.0
    for acc in acc_per_step:
        running *= acc
        total += running
    return total


# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom; between entries the next
# lower one is used (slightly wider: the interval never claims more than it has).
T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
    20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
    29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip


def t975(df: int) -> float:
    """T975 at `df` degrees of freedom (df >= 1); past the table, the normal's 1.960."""
    return T975[max(d for d in T975 if d <= df)] if df <= 120 else 1.960


def mean_ci95(values: list[float], bounds: tuple[float, float] | None = None) -> list[float] | None:
    """[low, high] of the mean's 95% interval over `values` (DEFINITIONS["mean_ci95"]); None under two.
    `bounds`: the range the quantity lives in (a probability: (0, 1)); the t interval, symmetric, can reach
    past it on few skewed samples, and a probability below 0 is no answer: it is cut at the bounds."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    spread = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    half = t975(n - 1) * spread / n**0.5
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return [low, high]


def run_metrics(steps: list[StepRecord], num_steps: int, batch_size: int = 1) -> RunMetrics:
    """The run's metrics from its records (`batch_size` > 1: its verify times are a batch forward's,
    shared evenly, and it says so)."""
    verified = [s for s in steps if s.is_verify_step]
    expected = [s.tree.expected_accepted for s in verified if s.tree and s.tree.expected_accepted is not None]
    return replace(
        acceptance_metrics(
            [s.accepted_count for s in verified], num_steps, [len(s.drafted_ids) for s in verified]
        ),
        draft_ms_total=sum(s.draft_ms for s in steps),
        verify_ms_total=sum(s.verify_ms for s in steps),
        expected_accept_length=expected_accept_length(expected) if len(expected) == len(verified) else None,
        # the positions whose token a near-tie chose (sampling.near_tie_rows), for Decode's note
        near_ties=tuple(s.position + row + 1 for s in verified for row in s.near_tie_rows),
        batch_size=batch_size if batch_size > 1 else None,
    )
