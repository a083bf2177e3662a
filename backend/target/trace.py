"""A trace: the target computed once for one sample, and the target runner that answers a replay from it.

A trace holds the prompt, the target's greedy continuation (generated past any end-of-generation id,
`MARGIN` tokens past the budget, so that a replay's last verify step sees every draft it could
accept), the residual-stream states at the HF indices it was captured with, and of every position's
logits row what a greedy verify reads: the top `TOP` token ids and log-probabilities, the entropy and
whether the top two are a near-tie (target_runner.RowStats).

With those, a greedy replay needs no target forward: a verify over [x_n, d_1..d_K] at positions n..
agrees with the target's own continuation for as long as the drafts do, so the rows the acceptance
reads (0..a: the accepted prefix and the row whose argmax is the bonus) are rows of the trace, and the
features fed back (positions n..n+a) are the trace's too. `TraceRunner` answers exactly those rows;
a row after the first disagreeing draft is one no target has computed for this sample, and a trace
output does not hold it. Every draft, wiring and K replays over the same trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backend import BadInput
from backend.target.target_runner import RowStats, TargetOutput, TargetRunner

TOP = 8  # token ids and log-probabilities kept per position
MARGIN = 16  # tokens past the budget: a replay's K may be at most this


@dataclass
class Trace:
    prompt_ids: list[int]
    continuation: list[int]  # the target's greedy tokens after the prompt, EOS ignored (`tokens_read`)
    states: dict[int, torch.Tensor]  # HF index -> [L, Ht] (L = prompt + continuation), fp32 on the CPU
    top_ids: torch.Tensor  # [L, TOP] long: row p's most likely next tokens, the argmax first
    top_logprobs: torch.Tensor  # [L, TOP] float
    entropies: torch.Tensor  # [L] nats
    near_tie: torch.Tensor  # [L] bool
    budget: int  # the max new tokens it was captured for
    source: str  # where the target ran: "local (lean, fp32, cpu)", "vLLM at URL"

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.continuation

    def stats(self, start: int, rows: int) -> RowStats:
        end = start + rows
        return RowStats(
            self.top_ids[start:end, 0].tolist(),
            self.top_logprobs[start:end, 0].exp().tolist(),
            self.entropies[start:end].tolist(),
            self.near_tie[start:end].tolist(),
        )

    def check_fits(self, max_new_tokens: int, num_steps: int, indices, stops=frozenset()) -> None:
        """BadInput unless a replay with this budget, K and wiring, ending at any of the ids `stops`,
        can be answered from this trace."""
        if max_new_tokens > self.budget:
            raise BadInput(f"the trace holds {self.budget} new tokens; the replay asks {max_new_tokens}")
        read = tokens_read(self.continuation, max_new_tokens, stops)
        if len(self.continuation) < read:
            raise BadInput(
                f"the trace's continuation ends after {len(self.continuation)} tokens (where the replays it "
                f"was captured for stop reading); this replay may read {read}: capture it again"
            )
        if num_steps > MARGIN:
            raise BadInput(f"a replay over a trace drafts at most K = {MARGIN}; asked K = {num_steps}")
        missing = sorted(set(indices) - set(self.states))
        if missing:
            raise BadInput(
                f"the trace holds the target's states at HF {sorted(self.states)}, not at HF {missing}: "
                "capture it again with those layers (or all)"
            )


def tokens_read(continuation: list[int], max_new_tokens: int, stops) -> int:
    """How many tokens of a target's `continuation` a replay of at most `max_new_tokens` new tokens that
    ends at any id in `stops` may read: up to where it ends (its budget, or just past its first stop id),
    and MARGIN past that, where its last verify step's drafts (K <= MARGIN) are checked."""
    ends = (i + 1 for i, token in enumerate(continuation[:max_new_tokens]) if token in stops)
    return next(ends, max_new_tokens) + MARGIN


@dataclass
class TraceOutput(TargetOutput):
    """A verify answered from a trace: the rows it holds (`stats`), and as `logits` only what a
    greedy first token reads (each row's top log-probabilities, every other token at -inf)."""

    row_stats: RowStats | None = None

    def stats(self) -> RowStats:
        return self.row_stats


class TraceCache:
    """What stands for the target's KV cache: how many positions are committed, and whose trace."""

    def __init__(self):
        self.trace: Trace | None = None
        self.length = 0

    def crop(self, length: int) -> None:
        self.length = min(self.length, length)

    def keep_rows(self, start: int, rows: list[int]) -> None:
        self.length = start + len(rows)


class TraceRunner(TargetRunner):
    """A target runner that answers greedy chain replays from traces (one per prompt), on `device`."""

    name = "trace"

    def __init__(self, traces: list[Trace], vocab_size: int, device: torch.device):
        self.traces = {tuple(t.prompt_ids): t for t in traces}
        self.vocab_size, self._device = vocab_size, device

    @property
    def device(self) -> torch.device:
        return self._device

    def add(self, traces: list[Trace]) -> None:
        self.traces |= {tuple(t.prompt_ids): t for t in traces}

    @property
    def described(self) -> str:
        return f"trace, captured by {self.source}"

    @property
    def source(self) -> str:
        """Where the target of its traces ran, in words."""
        return "; ".join(sorted({t.source for t in self.traces.values()})) or "no trace yet"

    def new_cache(self) -> TraceCache:
        return TraceCache()

    def run(self, input_ids, cache: TraceCache, positions, tree, wanted, last_logits) -> TraceOutput:
        ids, start = input_ids[0].tolist(), int(positions[0, 0])
        if tree is not None:
            return self._tree(ids, start, cache, tree, wanted)
        if cache.trace is None:  # the prefill: the prompt names its trace
            cache.trace = self.traces.get(tuple(ids)) if start == 0 else None
            if cache.trace is None:
                raise BadInput(f"no trace holds this prompt ({len(ids)} tokens starting {ids[:8]})")
        trace = cache.trace
        tokens = trace.tokens
        rows = 0  # rows the target computed for this sample: the fed tokens agree with its own
        while rows < len(ids) and start + rows < len(tokens) - 1 and ids[rows] == tokens[start + rows]:
            rows += 1
        if rows == 0:
            raise BadInput(
                f"position {start}: the replay fed {ids[0]}, the trace's target emitted {tokens[start]}"
            )
        cache.length = start + len(ids)
        first = start + rows - 1 if last_logits else start
        count = 1 if last_logits else rows
        states = {i: trace.states[i][start : start + rows].to(self._device) for i in wanted}
        logits = torch.full((1, count, self.vocab_size), -torch.inf, device=self._device)
        logits[0].scatter_(
            -1,
            trace.top_ids[first : first + count].to(self._device),
            trace.top_logprobs[first : first + count].to(self._device),
        )
        return TraceOutput(logits, states, row_stats=trace.stats(first, count))

    def _tree(self, ids: list[int], start: int, cache: TraceCache, tree, wanted) -> TraceOutput:
        """A tree verify from the trace: a node's row is the trace's where every node on its path (the
        root, its ancestors, itself) is the target's own token at its depth; the other rows no target
        computed for this sample (`known` False: a flat row the step blanks; greedy acceptance never
        reads one, and every path through one holds a rejected node first)."""
        trace, (depths, visible) = cache.trace, tree
        if trace is None:
            raise BadInput("a tree verify over a trace before its prefill")
        tokens, depths = trace.tokens, depths.tolist()
        places = [start + d for d in depths]
        matches = [p < len(tokens) - 1 and token == tokens[p] for token, p in zip(ids, places, strict=True)]
        known = [all(m for m, seen in zip(matches, row, strict=True) if seen) for row in visible.tolist()]
        if not known[0]:
            raise BadInput(
                f"position {start}: the replay fed {ids[0]}, the trace's target emitted {tokens[start]}"
            )
        cache.length = start + len(ids)
        logits = torch.zeros((1, len(ids), self.vocab_size), device=self._device)
        for row, place in enumerate(places):
            if known[row]:
                logits[0, row] = -torch.inf
                logits[0, row].scatter_(
                    0, trace.top_ids[place].to(self._device), trace.top_logprobs[place].to(self._device)
                )
        states = {
            i: torch.stack(
                [
                    trace.states[i][p] if k else torch.zeros_like(trace.states[i][0])
                    for p, k in zip(places, known, strict=True)
                ]
            ).to(self._device)
            for i in wanted
        }
        return TraceOutput(logits, states, known=known)
