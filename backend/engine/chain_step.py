"""One greedy chain step (topk 1, greedy acceptance): steps 1-7 of docs/reference.md §4 as replay.py's
docstring lists them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from backend.engine.draft_model import Eagle3Draft
from backend.engine.loading import Target
from backend.engine.penalties import History, Penalties
from backend.engine.step_state import (
    Caches,
    Cursor,
    ReplayConfig,
    commit_within_budget,
    draft_catch_up,
    elapsed_ms,
)
from backend.run.metrics import simulated_accept_length
from backend.run.records import StepRecord, StepTree
from backend.run.wiring import Wiring
from backend.target.kv_cache import KVCache
from backend.target.target_runner import RowStats, row_stats


@dataclass
class Proposal:
    """The chain d_1..d_K and, when recording, what the draft believed about each token."""

    drafted_ids: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    top_ids: list[list[int]] = field(default_factory=list)
    top_probs: list[list[float]] = field(default_factory=list)
    hidden: list[torch.Tensor] = field(default_factory=list)


@dataclass
class Verdict:
    """What the target's verify forward decided."""

    target_argmax: list[int]  # argmax of rows 0..K (a trace's: of the rows it holds, 0..a at least)
    accepted: int  # a
    bonus: int  # argmax of row a
    features: torch.Tensor  # [a+1, 3*Ht] fused features of positions n..n+a
    stats: RowStats  # what the record keeps of each row

    @property
    def emitted(self) -> list[int]:
        return self.target_argmax[: self.accepted] + [self.bonus]


def accepted_prefix_length(
    drafted: list[int], target_argmax: list[int], ends_prefix: set[int] | None = None
) -> int:
    """Greedy acceptance: the longest prefix where d_i equals the argmax of the row before it.
    `ends_prefix` (llama.cpp's end-of-generation ids): a matching draft among them ends the prefix
    before itself unless it is the last draft (common/sampling.cpp common_sampler_sample_and_accept_n
    breaks on it, so the target's own token is that id). A trace that ends (a forced trace at the last
    token an engine emitted: target/forced_trace.py) holds no row past its end: the count stops at its
    last row, whose argmax is the bonus (with K + 1 rows, as every verify computes, no bound at all)."""
    accepted, rows = 0, min(len(drafted), len(target_argmax) - 1)
    while accepted < rows and drafted[accepted] == target_argmax[accepted]:
        if ends_prefix and drafted[accepted] in ends_prefix and accepted + 1 < len(drafted):
            break
        accepted += 1
    return accepted


def draft_chains(
    draft: Eagle3Draft,
    caches: list[KVCache],
    hidden: torch.Tensor,
    positions: list[int],
    config: ReplayConfig,
    histories: list[History | None],
    steps: int,
) -> list[Proposal]:
    """2. Propose d_1..d_steps for B sequences at once (one when a sample replays alone). `hidden`
    [B, H] is each sequence's catch-up output at positions[b] (= n-1); step j feeds (out_{j-1}, d_j)
    at RoPE position n-1+j, each sequence on its own cache (the draft's matrix products over the B
    rows together). A request's penalty history, where the draft mirrors it, applies to its row.

    The chain stays on the device: each d_j is fed back as the tensor it was computed as, and the
    host reads the proposals once, at the end (on a GPU, no synchronisation per draft step). The
    probabilities (and, when recording, the top-k alternatives) of all steps come from one softmax
    and one top-k over the logit rows, read with one copy."""
    device, math = hidden.device, config.math
    fed_at = torch.tensor(positions, device=device)
    to_target = None
    drafted, rows, kept = [], [], []
    for j in range(1, steps + 1):
        logits = draft.logits(hidden, math)
        if config.penalties.on_draft and any(h is not None for h in histories):  # the draft mirrors it
            if to_target is None:
                to_target = draft.to_target_ids(torch.arange(logits.shape[-1], device=device))
            logits = torch.stack(
                [
                    row
                    if history is None
                    else history.apply_mapped(row, config.penalties, to_target, [int(d[b]) for d in drafted])
                    for b, (row, history) in enumerate(zip(logits, histories, strict=True))
                ]
            )
        target_ids = draft.to_target_ids(logits.argmax(-1))
        drafted.append(target_ids)
        rows.append(logits)
        if config.record:
            kept.append(hidden.detach().to("cpu"))
        if j < steps:
            fed = draft.feedback(hidden, math)  # out, or norm(out) under EAGLE 3.1 readings
            cache = caches[0] if len(caches) == 1 else caches
            hidden = draft(fed, target_ids, fed_at + j, cache, math=math)
    drafted_ids = torch.stack(drafted, dim=1).tolist()
    # d_j's own probability, kept by every run (where acceptance is lost reads it: calibration); the
    # alternatives only by recorded runs (the chips)
    probs = torch.softmax(torch.stack(rows, dim=1).float(), dim=-1)  # [B, steps, V]
    proposals = [Proposal(drafted_ids=ids) for ids in drafted_ids]
    if config.record:
        top = probs.topk(min(config.top_alternatives, probs.shape[-1]))
        values, ids = top.values.tolist(), draft.to_target_ids(top.indices).tolist()
        for b, proposal in enumerate(proposals):
            proposal.probs = [v[0] for v in values[b]]  # the argmax's probability: d_j's own
            proposal.top_ids, proposal.top_probs = ids[b], values[b]
            proposal.hidden = [step[b] for step in kept]
    else:
        for proposal, row in zip(proposals, probs.max(-1).values.tolist(), strict=True):
            proposal.probs = row
    return proposals


def judge(
    output,
    wiring: Wiring,
    drafted: list[int],
    penalised: tuple[History, Penalties] | None = None,
    ends_prefix: set[int] | None = None,
) -> Verdict:
    """4. What the verify forward over [x_n, d_1..d_K] (`output`, a TargetOutput) decided: the longest
    agreeing prefix (of the penalised rows when the request has penalties: row i after d_1..d_i)."""
    if penalised is not None:
        history, penalties = penalised
        stats = row_stats(history.apply(output.logits[0], penalties, drafted))
    else:
        stats = output.stats()
    target_argmax = stats.argmax
    accepted = accepted_prefix_length(drafted, target_argmax, ends_prefix)
    features = output.features(wiring.aux_hf_indices)[: accepted + 1]
    return Verdict(target_argmax, accepted, target_argmax[accepted], features, stats)


def roll_back(target_cache, draft_cache: KVCache, cursor: Cursor, accepted: int) -> None:
    """5. Keep x_n, d_1..d_a in the target cache; drop the draft's speculative chain entries."""
    target_cache.crop(cursor.position + accepted + 1)
    draft_cache.crop(min(cursor.position, draft_cache.length))  # a plain decode did not catch up


def step_record(
    step_index: int,
    cursor: Cursor,
    proposal: Proposal,
    verdict: Verdict,
    committed: list[int],
    draft_ms: float,
    verify_ms: float,
    record: bool,
) -> StepRecord:
    """7. The step's record, built once."""
    # the probabilities every run keeps (where acceptance is lost reads them: diagnostics/where_lost.py)
    stats = verdict.stats
    recorded = dict(
        target_argmax_probs=list(stats.top_probs),
        draft_probs=list(proposal.probs),
        near_tie_rows=[row for row, tie in enumerate(stats.near_tie[: verdict.accepted + 1]) if tie],
    )
    entropies = list(stats.entropies)
    if record:
        recorded |= dict(
            draft_top_ids=proposal.top_ids,
            draft_top_probs=proposal.top_probs,
            # rows for positions n..n+c: a step cut short keeps no features past the output
            aux_features=verdict.features[: min(len(committed), verdict.accepted) + 1].to("cpu"),
            draft_hidden=torch.stack(proposal.hidden),
        )
    return StepRecord(
        step_index,
        cursor.position,
        cursor.pending,
        proposal.drafted_ids,
        verdict.accepted,
        verdict.bonus,
        committed,
        verdict.target_argmax,
        draft_ms,
        verify_ms,
        tree=chain_tree(proposal, verdict, recorded["target_argmax_probs"], entropies),
        **recorded,
    )


def chain_tree(
    proposal: Proposal,
    verdict: Verdict,
    argmax_probs: list[float] | None,
    entropies: list[float] | None = None,
) -> StepTree:
    """A greedy chain step as a tree: node j hangs from node j-1, scores are the running product
    of the draft's probabilities, each node is accepted iff it is the argmax."""
    drafted, accepted = proposal.drafted_ids, verdict.accepted
    shape = dict(
        tokens=list(drafted),
        parents=list(range(-1, len(drafted) - 1)),
        depths=list(range(1, len(drafted) + 1)),
        accepted_path=list(range(accepted)),
        decisions=["accepted"] * accepted + ["rejected"] + ["unreached"] * (len(drafted) - accepted - 1)
        if accepted < len(drafted)
        else ["accepted"] * accepted,
    )
    if not proposal.probs:
        return StepTree(**shape)
    scores, running = [], 1.0
    for p in proposal.probs:
        running *= p
        scores.append(running)
    accept_probs = [float(d == a) for d, a in zip(drafted, verdict.target_argmax, strict=False)]
    return StepTree(
        **shape,
        scores=scores,
        draft_probs=list(proposal.probs),
        accept_probs=accept_probs,
        expected_accepted=float(simulated_accept_length(accept_probs)),  # sum of path products
        argmax=list(verdict.target_argmax),
        argmax_probs=list(argmax_probs or []),
        target_entropies=list(entropies or []),
    )


@dataclass
class DraftedStep:
    """A chain step drafted (its steps 1-2), ready for the target's verify: the proposal and what it cost."""

    proposal: Proposal
    draft_ms: float


@dataclass
class Chain:
    """One sample's greedy chain between verify steps: the pair, the settings, the caches, the cursor
    (None once the replay is finished), a request's penalty history, and the next step's index. A
    step is three parts, `propose`, the target's verify forward and `conclude`: `step` runs them for
    this sample, the batched replay (backend/engine/batch.py) runs the forward once for many."""

    target: Target
    draft: Eagle3Draft
    wiring: Wiring
    config: ReplayConfig
    caches: Caches
    cursor: Cursor | None
    history: History | None = None
    step_index: int = 0

    def propose(self) -> DraftedStep:
        """1-2. Catch the draft up on the committed positions and propose the chain (none where the
        reading drafts nothing this step: a plain decode of the pending token, llama.cpp's last
        token)."""
        started = time.perf_counter()
        hidden = self.catch_up()  # 1
        proposal = Proposal()
        if hidden is not None:
            (proposal,) = draft_chains(
                self.draft, [self.caches.draft], hidden, [self.cursor.position - 1], self.config,
                [self.history], self.num_drafts,
            )  # 2  # fmt: skip
        return self.proposed(proposal, elapsed_ms(started, next(self.draft.parameters()).device))

    @property
    def num_drafts(self) -> int:
        return self.config.drafts_at(self.cursor.produced)

    def catch_up(self) -> torch.Tensor | None:
        """1. The draft over the positions the target committed last: its output at n-1 [1, H], from
        which d_1 is read; None when this step drafts nothing."""
        if not self.num_drafts:
            return None
        return draft_catch_up(self.draft, self.caches.draft, self.cursor, self.config.math)

    def proposed(self, proposal: Proposal, draft_ms: float) -> DraftedStep:
        """The step's proposal, with zero rows kept for drafts a shorter step skipped (llama.cpp's
        reading), and what drafting it cost."""
        draft, config = self.draft, self.config
        missing = config.num_steps - len(proposal.drafted_ids)
        if config.record and missing:  # fewer drafts: K rows kept, zeros (never read)
            weight = next(draft.parameters())
            proposal.hidden += [weight.new_zeros(draft.config.hidden_size, device="cpu")] * missing
        return DraftedStep(proposal, draft_ms)

    def verify_ids(self, proposed: DraftedStep) -> list[int]:
        """3. What the target verifies: [x_n, d_1..d_K], at positions n..n+K."""
        return [self.cursor.pending] + proposed.proposal.drafted_ids

    def conclude(self, proposed: DraftedStep, output, verify_ms: float) -> StepRecord:
        """4-7. Judge the verify forward's `output` (a TargetOutput), roll back, commit within the
        budget, record; the cursor moves on (None when the replay is finished) and the penalty
        history takes the committed tokens."""
        target, cursor, config, history = self.target, self.cursor, self.config, self.history
        eos = config.stops(target.eos_token_ids)
        started = time.perf_counter()
        penalised = None if history is None else (history, config.penalties)
        ends_prefix = eos if config.accounting == "llamacpp" else None
        verdict = judge(output, self.wiring, proposed.proposal.drafted_ids, penalised, ends_prefix)  # 4
        roll_back(self.caches.target, self.caches.draft, cursor, verdict.accepted)  # 5
        verify_ms += elapsed_ms(started, target.device)
        committed, finished = commit_within_budget(
            verdict.emitted, cursor.produced, eos, config.max_new_tokens
        )  # 6
        record = step_record(
            self.step_index,
            cursor,
            proposed.proposal,
            verdict,
            committed,
            proposed.draft_ms,
            verify_ms,
            config.record,
        )  # 7
        self.step_index += 1
        if finished:
            self.cursor = None
        else:
            if history is not None:
                history.add(committed)
            self.cursor = cursor.after(verdict.emitted, committed, verdict.features)
        return record

    def step(self) -> StepRecord:
        """One verify step of this sample alone."""
        proposed = self.propose()  # 1, 2
        started = time.perf_counter()
        ids = torch.tensor([self.verify_ids(proposed)], device=self.target.device)
        output = self.target.runner.forward(
            ids, self.caches.target, self.cursor.position, capture=self.wiring.aux_hf_indices
        )  # 3
        return self.conclude(proposed, output, elapsed_ms(started, self.target.device))  # 4-7
