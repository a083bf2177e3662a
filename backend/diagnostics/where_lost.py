"""Where a draft loses acceptance, over a set of stored runs: by draft position, by the kind of token
the target emitted, by the target's confidence and the context length, by prompt source and by span (a
reasoning model's thinking vs its answer), and how well the draft's own probability predicts
acceptance (calibration, and what a confidence threshold would have saved).

The unit is an ATTEMPT: draft position j of a verify step whose drafts 1..j-1 were accepted, so the
target judged d_j. A step accepting a of K drafts makes min(a + 1, K) attempts: j <= a accepted, j = a + 1
rejected; later drafts were never judged and are not counted. The target's token at attempt j is the
token the step committed there (the accepted draft, or the target's own token where it rejected).
Every rate says how many attempts (and samples) it counts; a group under MIN_ATTEMPTS says it is too
small to judge instead of showing a rate. Torch-free: the pages and the CLI read stored steps only.
"""

from __future__ import annotations

import math
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from backend.diagnostics.threshold_whatif import thresholds
from backend.diagnostics.where_lost_result import (
    DFLASH_POSITIONS,
    Calibration,
    CalibrationBin,
    DraftLosses,
    GroupRate,
    LostRun,
    PositionRate,
    RejectedToken,
    WhereLost,
)
from backend.run.metrics import drafted_position_rates, mean_ci95

MIN_ATTEMPTS = 20  # fewer attempts than this: a group is reported as too small to judge
EXAMPLES = 50  # steps kept per group and position for a reader to open (rejections first)
BINS = 10  # calibration bins of the draft's probability, equal width over [0, 1]
CONFIDENCE_TIERS = (
    (0.0, 0.5, "low (p < 0.5)"),
    (0.5, 0.9, "medium (0.5 <= p < 0.9)"),
    (0.9, 1.01, "high (p >= 0.9)"),
)
ENTROPY_TIERS = (
    (0.0, 0.5, "low (H < 0.5 nats)"),
    (0.5, 2.0, "medium (0.5 <= H < 2)"),
    (2.0, math.inf, "high (H >= 2)"),
)
CONTEXT_BUCKETS = (256, 512, 1024, 2048, 4096)
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
UNRECORDED = "not recorded"


@dataclass(frozen=True)
class _Attempt:
    run_id: int
    step_index: int
    position: int  # j, 1-based
    accepted: bool
    token: int  # the target's token there
    draft_probability: float | None
    target_probability: float | None
    target_entropy: float | None
    context: int  # tokens before it
    source: str
    span: str | None  # "thinking" | "answer" | None (no thinking span anywhere)
    block: str | None  # "code" | "prose" | None (no fenced code anywhere)


def token_kind(text: str, token_id: int, special: frozenset[int]) -> str:
    """A reader's class of one token (see DEFINITIONS['token_kind'])."""
    if token_id in special:
        return "special"
    stripped = text.strip()
    if not stripped:
        return "whitespace / indentation"
    if stripped.isdigit():
        return "digits"
    if all(unicodedata.category(c)[0] in "PS" for c in stripped):
        return "punctuation"
    if all(c.isalnum() or c == "_" for c in stripped):
        return "words / identifiers"
    return "mixed"


NO_TOKENIZER = "unknown (no tokenizer)"


def where_lost(
    named_runs: dict[str, list[LostRun]],
    text: Callable[[int], str] | None,
    special: frozenset[int] = frozenset(),
) -> WhereLost:
    """Each draft's losses over its runs (`named_runs`: draft name -> its runs); `text`: one token id's
    text (the target's tokenizer; None where it cannot be read: no kinds, spans or blocks then),
    `special`: the tokenizer's special token ids."""
    cached = None if text is None else _memo(text)
    return WhereLost([_losses(name, runs, cached, special) for name, runs in named_runs.items()])


def _memo(text: Callable[[int], str]) -> Callable[[int], str]:
    seen: dict[int, str] = {}

    def once(token: int) -> str:
        if token not in seen:
            seen[token] = text(token)
        return seen[token]

    return once


def _losses(name: str, runs: list[LostRun], text, special) -> DraftLosses:
    attempts = _attempts(runs, text)
    verify = [s for r in runs for s in r.steps if s.drafted_ids]
    if text is None:
        kind = dict.fromkeys((a.token for a in attempts), NO_TOKENIZER)
        text = str
    else:
        kind = {a.token: token_kind(text(a.token), a.token, special) for a in attempts}
    notes = []
    if NO_TOKENIZER in kind.values():
        notes.append("the target's tokenizer cannot be read: no token kinds, spans or code blocks (ids only)")
    if any(a.span is None for a in attempts):
        notes.append("no thinking span in these outputs: the span split is left out")
    if any(a.block is None for a in attempts):
        notes.append("no fenced code (```) in these outputs: the code vs prose split is left out")
    if any(r.draft_method == "dflash" for r in runs):
        notes.append(DFLASH_POSITIONS)
    chains = [r for r in runs if r.greedy_chain]
    if len(chains) < len(runs):
        notes.append(
            f"calibration and the threshold what-if read the {len(chains)} greedy-chain runs of {len(runs)} (a "
            "tree's or a sampled run's acceptance is not the favourite draft's own top-1 match)"
        )
    lengths = [sum(1 for s in r.steps if s.drafted_ids) for r in runs]
    if lengths and min(lengths) * 2 <= max(lengths):
        notes.append(
            f"runs of {min(lengths)} to {max(lengths)} verify steps: pooled numbers (per token kind, "
            "confidence, calibration, the what-if) weigh every step once, so longer runs weigh more; the "
            "position chart's mean over samples weighs every run once"
        )
    chain_ids = {r.run_id for r in chains}
    unmeasured = sum(a.target_entropy is None for a in attempts)
    if unmeasured:
        notes.append(
            f"{unmeasured} of {len(attempts)} attempts come from runs stored before the target's entropy was "
            "kept: the entropy split counts the others"
        )
    scored = any(a.draft_probability is not None for a in attempts)
    if attempts and not scored:
        notes.append(
            "these runs kept no draft probabilities (replays made before they were recorded on every "
            "step): no calibration and no threshold what-if; replay them again to get both"
        )
    return DraftLosses(
        name=name,
        runs=len(runs),
        run_ids=sorted(r.run_id for r in runs),
        verify_steps=len(verify),
        attempts=len(attempts),
        by_position=_by_position(runs),
        by_kind=_groups(attempts, lambda a: kind[a.token]),
        top_rejected=_top_rejected(attempts, text, kind),
        by_confidence=_groups(
            attempts, _confidence_tier, order=[*(t[2] for t in CONFIDENCE_TIERS), UNRECORDED]
        ),
        by_context=_groups(attempts, _context_bucket, order=_context_order()),
        by_entropy=_groups(
            [a for a in attempts if a.target_entropy is not None],
            _entropy_tier,
            len(attempts),
            order=[t[2] for t in ENTROPY_TIERS],
        ),
        by_source=_groups(attempts, lambda a: a.source.split("/")[0] or a.source),
        by_span=_groups([a for a in attempts if a.span is not None], lambda a: a.span, len(attempts)),
        by_block=_groups([a for a in attempts if a.block is not None], lambda a: a.block, len(attempts)),
        calibration=_calibration([a for a in attempts if a.run_id in chain_ids]),
        threshold_whatif=thresholds(chains, notes)
        if scored or not attempts
        else thresholds(chains, notes)[:1],
        notes=notes,
    )


def _attempts(runs: list[LostRun], text) -> list[_Attempt]:
    found = []
    if text is None:  # no tokenizer: no spans or blocks to read
        text, thinking_seen, fences_seen = str, False, False
    else:
        tokens = [text(t) for r in runs for t in _read_before(r)] + [
            text(t) for r in runs for s in r.steps for t in s.committed_ids
        ]
        thinking_seen = any(THINK_OPEN in t or THINK_CLOSE in t for t in tokens)
        fences_seen = "```" in "".join(t for t in tokens if "`" in t)
    for run in runs:
        spans = _Spans()
        if thinking_seen or fences_seen:
            for token in _read_before(run):  # the prompt, then the prefill's first output token
                spans.read(text(token))
        for step in run.steps:
            drafted = list(step.drafted_ids)
            committed = list(step.committed_ids)
            for j in range(1, min(step.accepted_count + 1, len(drafted)) + 1):
                token = committed[j - 1] if j - 1 < len(committed) else step.target_argmax_ids[j - 1]
                found.append(
                    _Attempt(
                        run.run_id,
                        step.step_index,
                        j,
                        j <= step.accepted_count,
                        token,
                        _probability(_at(step.draft_probs, j - 1)),
                        _probability(_at(step.target_argmax_probs, j - 1)),
                        _entropy_at(step, j),
                        step.position + j,  # x_n's position + 1 + (j - 1): tokens before d_j
                        run.source,
                        spans.span() if thinking_seen else None,
                        spans.block() if fences_seen else None,
                    )
                )
                spans.read(text(token))
            if step.accepted_count >= len(drafted) and committed:
                spans.read(text(committed[-1]))  # the bonus after K accepted
    return found


class _Spans:
    """Where the output is, read token by token: inside a thinking span (<think> ... </think>) and
    inside a fenced code block (``` ... ```, counted across tokens that split the backticks)."""

    def __init__(self) -> None:
        self.thinking = self.code = False
        self.ticks = 0

    def read(self, token_text: str) -> None:
        if THINK_CLOSE in token_text:
            self.thinking = False
        elif THINK_OPEN in token_text:
            self.thinking = True
        for character in token_text:
            self.ticks = self.ticks + 1 if character == "`" else 0
            if self.ticks == 3:
                self.code, self.ticks = not self.code, 0

    def span(self) -> str:
        return "thinking" if self.thinking else "answer"

    def block(self) -> str:
        return "code" if self.code else "prose"


def _read_before(run: LostRun) -> list[int]:
    """The tokens before the first step's drafts: the prompt and the prefill's first output token."""
    first = [run.steps[0].pending_token] if run.steps and hasattr(run.steps[0], "pending_token") else []
    return [*run.prompt_ids, *first]


def _entropy_at(step, j: int) -> float | None:
    """The target's entropy at attempt j: verify row 0 for d_1, else the row of the accepted node
    d_{j-1} (a tree's rows are its nodes in tree order; a chain's are j - 1)."""
    tree = getattr(step, "tree", None)
    entropies = getattr(tree, "target_entropies", None)
    if not entropies:
        return None
    path = getattr(tree, "accepted_path", None) or list(range(j - 1))
    row = 0 if j == 1 else path[j - 2] + 1 if j - 2 < len(path) else None
    value = _at(entropies, row) if row is not None else None
    return value if value is None or math.isfinite(value) else None


def _probability(value) -> float | None:
    """A stored probability, clamped to [0, 1]; NaN or missing: None (not recorded)."""
    if value is None or not math.isfinite(value):
        return None
    return min(1.0, max(0.0, float(value)))


def _at(values, index):
    return values[index] if values is not None and index < len(values) else None


def _by_position(runs: list[LostRun]) -> list[PositionRate]:
    """P(a >= i) and P(a >= i | a >= i-1) pooled as a run's metrics compute them (over the steps that
    drafted position i), with the mean over samples, its interval, and the first steps rejecting d_i."""
    drafted = [(r.run_id, s) for r in runs for s in r.steps if s.drafted_ids]
    depth = max((len(s.drafted_ids) for _, s in drafted), default=0)
    marginal, conditional = drafted_position_rates(
        [s.accepted_count for _, s in drafted], [len(s.drafted_ids) for _, s in drafted], depth
    )
    rows = []
    for i in range(1, depth + 1):
        reached = [(run_id, s.accepted_count) for run_id, s in drafted if len(s.drafted_ids) >= i]
        rejected = [
            [run_id, s.step_index]
            for run_id, s in drafted
            if len(s.drafted_ids) >= i and s.accepted_count == i - 1
        ]
        per_run = defaultdict(list)
        for run_id, a in reached:
            per_run[run_id].append(a >= i)
        means = [sum(v) / len(v) for v in per_run.values()]
        rows.append(
            PositionRate(
                position=i,
                steps=len(reached),
                marginal=marginal[i - 1],
                marginal_mean=sum(means) / len(means) if means else None,
                marginal_ci95=mean_ci95(means, bounds=(0.0, 1.0)),  # a probability
                conditional=conditional[i - 1],
                samples=len(per_run),
                rejected_at=rejected[:EXAMPLES],
                rejections=len(rejected),
            )
        )
    return rows


def _groups(
    attempts: list[_Attempt], key, total: int | None = None, order: list[str] | None = None
) -> list[GroupRate]:
    """One GroupRate per value of `key`, by attempts (most first) or in `order`."""
    total = total if total is not None else len(attempts)
    grouped: dict[str, list[_Attempt]] = defaultdict(list)
    for a in attempts:
        grouped[key(a)].append(a)
    names = [g for g in order if g in grouped] if order else sorted(grouped, key=lambda g: -len(grouped[g]))
    rows = []
    for name in names:
        members = grouped[name]
        n, k = len(members), sum(a.accepted for a in members)
        judged = n >= MIN_ATTEMPTS
        rows.append(
            GroupRate(
                group=name,
                attempts=n,
                accepted=k,
                share=n / total if total else 0.0,
                rate=k / n if judged else None,
                ci95=wilson(k, n) if judged else None,
                samples=len({a.run_id for a in members}),
                note="" if judged else f"{n} attempts: too few to judge (fewer than {MIN_ATTEMPTS})",
                examples=[
                    [a.run_id, a.step_index, a.position, int(a.accepted)]
                    for a in sorted(members, key=lambda a: a.accepted)[:EXAMPLES]
                ],
            )
        )
    return rows


def wilson(successes: int, n: int, z: float = 1.959964) -> list[float] | None:
    """The 95% Wilson score interval of a proportion (None for n = 0)."""
    if n == 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - spread), min(1.0, centre + spread)]


def _top_rejected(attempts: list[_Attempt], text, kind: dict, limit: int = 15) -> list[RejectedToken]:
    rejected = [a for a in attempts if not a.accepted]
    counts = Counter(a.token for a in rejected)
    examples = defaultdict(list)
    for a in rejected:
        if len(examples[a.token]) < 3:
            examples[a.token].append([a.run_id, a.step_index])
    return [
        RejectedToken(token, text(token), kind[token], n, examples[token])
        for token, n in counts.most_common(limit)
    ]


def _confidence_tier(a: _Attempt) -> str:
    if a.target_probability is None:
        return UNRECORDED
    return next(name for low, high, name in CONFIDENCE_TIERS if low <= a.target_probability < high)


def _entropy_tier(a: _Attempt) -> str:
    return next(name for low, high, name in ENTROPY_TIERS if low <= a.target_entropy < high)


def _context_order() -> list[str]:
    edges = (0, *CONTEXT_BUCKETS)
    return [f"{lo}-{hi - 1}" for lo, hi in zip(edges, edges[1:], strict=False)] + [
        f">= {CONTEXT_BUCKETS[-1]}"
    ]


def _context_bucket(a: _Attempt) -> str:
    edges = (0, *CONTEXT_BUCKETS)
    for lo, hi in zip(edges, edges[1:], strict=False):
        if a.context < hi:
            return f"{lo}-{hi - 1}"
    return f">= {CONTEXT_BUCKETS[-1]}"


def _calibration(attempts: list[_Attempt]) -> list[Calibration]:
    scored = [a for a in attempts if a.draft_probability is not None]
    positions = sorted({a.position for a in scored})
    return [_calibrated(None, scored)] + [
        _calibrated(p, [a for a in scored if a.position == p]) for p in positions
    ]


def _calibrated(position: int | None, scored: list[_Attempt]) -> Calibration:
    bins = []
    ece = 0.0
    for b in range(BINS):
        low, high = b / BINS, (b + 1) / BINS
        inside = [
            a
            for a in scored
            if low <= a.draft_probability < high or (b == BINS - 1 and a.draft_probability == 1.0)
        ]
        mean_p = sum(a.draft_probability for a in inside) / len(inside) if inside else None
        rate = sum(a.accepted for a in inside) / len(inside) if inside else None
        if inside:
            ece += len(inside) / len(scored) * abs(rate - mean_p)
        bins.append(CalibrationBin(low, high, len(inside), mean_p, rate))
    probabilities, accepted = [a.draft_probability for a in scored], [bool(a.accepted) for a in scored]
    brier = (
        sum((p - y) ** 2 for p, y in zip(probabilities, accepted, strict=True)) / len(scored)
        if scored
        else None
    )
    return Calibration(
        position, len(scored), ece if scored else None, bins, brier, auroc(probabilities, accepted)
    )


def auroc(scores: list[float], positive: list[bool]) -> float | None:
    """P(a positive's score > a negative's), ties half (Mann-Whitney U over average ranks); None
    without both kinds."""
    n_pos = sum(positive)
    n_neg = len(positive) - n_pos
    if not n_pos or not n_neg:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks, i = [0.0] * len(scores), 0
    while i < len(order):  # tied scores share their average rank
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    positive_ranks = sum(r for r, y in zip(ranks, positive, strict=True) if y)
    return (positive_ranks - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
