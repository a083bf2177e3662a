"""Greedy chain speculative decoding (topk = 1, K draft steps), replayed one verify step at a time.

Pending-token convention (docs/reference.md §4): the target cache holds the committed prefix except
the newest token x_n. Each verify step:

  1. draft catch-up: the draft runs over the positions the target just committed, with inputs
     (A_p, x_{p+1}) at RoPE position p, where A_p are the target's fused aux features;
  2. draft chain: from the last catch-up output, K-1 more steps with (out_prev, d_j) at n-1+j;
  3. verify: the target runs [x_n, d_1..d_K] at positions n..n+K; row i predicts the token after n+i;
  4. accept the longest prefix with d_i == argmax(row i-1); the bonus is argmax(row a);
  5. roll back: the target cache keeps x_n, d_1..d_a; the draft cache drops its speculative entries;
  6. commit the a + 1 tokens within the budget (EOS or max_new_tokens ends the replay);
  7. record the step (once, with everything it needs).

Every step emits a + 1 tokens, so the output equals the target's plain greedy output.

Trees (topk > 1) and sampled acceptance run the same loop with `tree_step`: the draft proposes a
tree (backend/engine/tree.py), the target verifies it in one forward under a tree mask, the
acceptance rule walks it (greedy, or an engine's sampling rule: backend/engine/sampling.py), and
the caches keep the root and the accepted path.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from backend.engine.draft_model import Eagle3Draft
from backend.engine.kv_cache import KVCache
from backend.engine.loading import Target
from backend.engine.metrics import simulated_accept_length
from backend.engine.penalties import NONE as NO_PENALTIES
from backend.engine.penalties import History, Penalties
from backend.engine.readings import DraftMath
from backend.engine.records import PrefillRecord, StepRecord
from backend.engine.sampling import GREEDY, Sampling, exponential_race, inverse_cdf, target_distribution
from backend.engine.shapes import DRAFT_ATTENTION, TreeShape
from backend.engine.tree import (
    DraftTree,
    TreeVerdict,
    accept_tree,
    draft_tree,
    expected_accepted,
    main_path,
)
from backend.engine.wiring import Wiring


@dataclass(frozen=True)
class ReplayConfig:
    num_steps: int = 4  # K: drafted tokens per verify step
    max_new_tokens: int = 128
    record: bool = True  # probabilities, top-k alternatives and hidden states
    top_alternatives: int = 5
    math: DraftMath | None = None  # the draft's math under an engine's reading (None: the training reading)
    topk: int = 1  # k: children per frontier node (1: a chain)
    num_draft_tokens: int | None = None  # N: verified tokens incl. the root (SGLang's effective value)
    sampling: Sampling = GREEDY
    draft_attention: str = "ancestors"  # tree drafts: true ancestors, or SGLang's per-rank KV slots
    force_tree: bool = False  # run a chain through the tree path (tests: topk 1 equals the chain)
    penalties: Penalties = NO_PENALTIES  # on the target when it verifies (and the draft if on_draft)

    def __post_init__(self):
        if self.num_steps < 1:
            raise ValueError("num_steps (K) must be >= 1")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if self.topk < 1:
            raise ValueError("topk must be >= 1")
        if self.num_draft_tokens is None:
            if self.topk > 1:
                raise ValueError("topk > 1 needs num_draft_tokens")
            object.__setattr__(self, "num_draft_tokens", self.num_steps + 1)
        if self.topk == 1 and self.num_draft_tokens != self.num_steps + 1:
            raise ValueError("a chain (topk 1) verifies num_steps + 1 tokens")
        if not 2 <= self.num_draft_tokens <= self.shape.max_candidates + 1:
            raise ValueError(
                f"num_draft_tokens must be in 2..{self.shape.max_candidates + 1} for steps="
                f"{self.num_steps}, topk={self.topk}"
            )
        if self.penalties.active and self.uses_tree_path:
            raise ValueError("sampling penalties replay on the greedy chain only (topk 1, temperature 0)")
        if self.draft_attention not in DRAFT_ATTENTION:
            raise ValueError(f"draft_attention must be one of {', '.join(DRAFT_ATTENTION)}")

    @property
    def shape(self) -> TreeShape:
        return TreeShape(self.num_steps, self.topk, self.num_draft_tokens)

    @property
    def uses_tree_path(self) -> bool:
        return self.topk > 1 or not self.sampling.greedy or self.force_tree


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

    target_argmax: list[int]  # argmax of rows 0..K
    accepted: int  # a
    bonus: int  # argmax of row a
    features: torch.Tensor  # [a+1, 3*Ht] fused features of positions n..n+a
    logits: torch.Tensor  # [K+1, V]

    @property
    def emitted(self) -> list[int]:
        return self.target_argmax[: self.accepted] + [self.bonus]


@dataclass(frozen=True)
class Caches:
    """The two KV caches of one replay: the target's (its runner's) and the draft's."""

    target: object
    draft: KVCache


@dataclass
class Cursor:
    """Where the decode stands: the pending token x_n at position n, and what the draft must catch
    up on (the features and next tokens of the positions the target committed last)."""

    position: int
    pending: int
    produced: int
    catch_up_features: torch.Tensor
    catch_up_tokens: list[int]
    catch_up_start: int


def accepted_prefix_length(drafted: list[int], target_argmax: list[int]) -> int:
    """Greedy acceptance: the longest prefix where d_i equals the argmax of the row before it."""
    accepted = 0
    while accepted < len(drafted) and drafted[accepted] == target_argmax[accepted]:
        accepted += 1
    return accepted


def draft_catch_up(
    draft: Eagle3Draft, cache: KVCache, cursor: Cursor, math: DraftMath | None = None
) -> torch.Tensor:
    """1. Run the draft over committed positions with (A_p, x_{p+1}); return the last output hidden
    [1, H], from which d_1 is read."""
    features, tokens, start = cursor.catch_up_features, cursor.catch_up_tokens, cursor.catch_up_start
    device = features.device
    positions = torch.arange(start, start + len(tokens), device=device)
    hidden = draft(
        draft.fuse(features, math), torch.tensor(tokens, device=device), positions, cache, math=math
    )
    return hidden[-1:]


def draft_chain(
    draft: Eagle3Draft,
    cache: KVCache,
    hidden: torch.Tensor,
    position: int,
    config: ReplayConfig,
    history: History | None = None,
) -> Proposal:
    """2. Propose d_1..d_K. `hidden` is the catch-up output at `position` (= n-1); step j feeds
    (out_{j-1}, d_j) at RoPE position n-1+j.

    The chain stays on the device: each d_j is fed back as the tensor it was computed as, and the
    host reads the K proposals once, at the end (on a GPU, no synchronisation per draft step). When
    recording, the probabilities and top-k alternatives of all K steps come from one softmax and one
    top-k over the K logit rows, read with one copy."""
    proposal = Proposal()
    device = hidden.device
    positions = torch.arange(position + 1, position + config.num_steps, device=device)
    drafted, rows = [], []
    for j in range(1, config.num_steps + 1):
        logits = draft.logits(hidden, config.math)[-1]
        if history is not None and config.penalties.on_draft:  # the draft mirrors the penalty
            to_target = draft.to_target_ids(torch.arange(logits.shape[-1], device=device))
            logits = history.apply_mapped(logits, config.penalties, to_target, [int(t) for t in drafted])
        target_id = draft.to_target_ids(logits.argmax())
        drafted.append(target_id)
        if config.record:
            rows.append(logits)
            proposal.hidden.append(hidden[-1].detach().to("cpu"))
        if j < config.num_steps:
            fed = draft.feedback(hidden, config.math)  # out, or norm(out) under EAGLE 3.1 readings
            hidden = draft(fed, target_id.view(1), positions[j - 1 : j], cache, math=config.math)
    proposal.drafted_ids = torch.stack(drafted).tolist()
    if config.record:
        probs = torch.softmax(torch.stack(rows), dim=-1)
        top = probs.topk(min(config.top_alternatives, probs.shape[-1]))
        proposal.probs = top.values[:, 0].tolist()  # the argmax's probability: d_j's own
        proposal.top_ids = draft.to_target_ids(top.indices).tolist()
        proposal.top_probs = top.values.tolist()
    return proposal


def verify(
    target: Target,
    wiring: Wiring,
    cache,
    cursor: Cursor,
    drafted: list[int],
    penalised: tuple[History, Penalties] | None = None,
) -> Verdict:
    """3-4. One target forward over [x_n, d_1..d_K]; accept the longest agreeing prefix (of the
    penalised rows when the request has penalties: row i after d_1..d_i)."""
    ids = torch.tensor([[cursor.pending] + drafted], device=target.device)
    output = target.runner.forward(ids, cache, cursor.position, capture=wiring.aux_hf_indices)
    logits = output.logits[0]
    if penalised is not None:
        history, penalties = penalised
        logits = history.apply(logits, penalties, drafted)
    target_argmax = logits.argmax(-1).tolist()
    accepted = accepted_prefix_length(drafted, target_argmax)
    features = output.features(wiring.aux_hf_indices)[: accepted + 1]
    return Verdict(target_argmax, accepted, target_argmax[accepted], features, logits)


def roll_back(target_cache, draft_cache: KVCache, cursor: Cursor, accepted: int) -> None:
    """5. Keep x_n, d_1..d_a in the target cache; drop the draft's speculative chain entries."""
    target_cache.crop(cursor.position + accepted + 1)
    draft_cache.crop(cursor.position)


def commit_within_budget(
    emitted: list[int], produced: int, eos: set[int], max_new_tokens: int
) -> tuple[list[int], bool]:
    """6. The emitted tokens that fit: up to and including an EOS, at most max_new_tokens in all.
    Returns (committed, finished)."""
    committed = []
    for token in emitted:
        committed.append(token)
        if token in eos or produced + len(committed) >= max_new_tokens:
            return committed, True
    return committed, False


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
    recorded = {}
    if record:
        target_probs = torch.softmax(verdict.logits.float(), dim=-1)
        recorded = dict(
            target_argmax_probs=target_probs.max(-1).values.tolist(),
            draft_probs=proposal.probs,
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
        tree=chain_tree(proposal, verdict, recorded.get("target_argmax_probs")),
        **recorded,
    )


def chain_tree(proposal: Proposal, verdict: Verdict, argmax_probs: list[float] | None) -> dict:
    """A greedy chain step as a tree: node j hangs from node j-1, scores are the running product
    of the draft's probabilities (recorded runs), each node is accepted iff it is the argmax."""
    drafted, accepted = proposal.drafted_ids, verdict.accepted
    tree = {
        "tokens": list(drafted),
        "parents": list(range(-1, len(drafted) - 1)),
        "depths": list(range(1, len(drafted) + 1)),
        "accepted_path": list(range(accepted)),
        "decisions": ["accepted"] * accepted + ["rejected"] + ["unreached"] * (len(drafted) - accepted - 1)
        if accepted < len(drafted)
        else ["accepted"] * accepted,
    }
    if proposal.probs:
        scores, running = [], 1.0
        for p in proposal.probs:
            running *= p
            scores.append(running)
        tree.update(scores=scores, draft_probs=list(proposal.probs))
        tree["accept_probs"] = [float(d == a) for d, a in zip(drafted, verdict.target_argmax, strict=False)]
        tree["expected_accepted"] = float(
            simulated_accept_length(tree["accept_probs"])
        )  # sum of path products
        tree["argmax"], tree["argmax_probs"] = list(verdict.target_argmax), list(argmax_probs or [])
    return tree


def replay(
    target: Target, draft: Eagle3Draft, prompt_ids: list[int], wiring: Wiring, config: ReplayConfig
) -> Iterator[PrefillRecord | StepRecord]:
    """Yield a PrefillRecord, then one StepRecord per verify step, until EOS or max_new_tokens."""
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    runner, device, indices = target.runner, target.device, wiring.aux_hf_indices
    eos = set(target.eos_token_ids)
    generator = None if config.sampling.greedy else torch.Generator().manual_seed(config.sampling.seed)
    with torch.inference_mode():
        started = time.perf_counter()
        target_cache = runner.new_cache()
        output = runner.forward(torch.tensor([prompt_ids], device=device), target_cache, 0, capture=indices)
        history = None
        last = output.logits[0, -1]
        if config.penalties.active:
            history = History(list(prompt_ids), last.shape[-1], last.device)
            last = history.apply(last[None], config.penalties)[0]
        first = first_token(last, config.sampling, generator)
        if history is not None:
            history.add([first])
        features = output.features(indices)
        yield PrefillRecord(
            list(prompt_ids),
            first,
            _elapsed_ms(started, device),
            features.to("cpu") if config.record else None,
        )
        if first in eos or config.max_new_tokens <= 1:
            return
        cursor = Cursor(len(prompt_ids), first, 1, features, list(prompt_ids[1:]) + [first], 0)
        draft_cache = KVCache(draft.config.num_layers)
        for step_index in range(config.max_new_tokens):  # each step commits >= 1 token
            if config.uses_tree_path:
                record, cursor = tree_step(
                    target,
                    draft,
                    wiring,
                    Caches(target_cache, draft_cache),
                    cursor,
                    config,
                    generator,
                    step_index,
                )
                yield record
                if cursor is None:
                    return
                continue
            started = time.perf_counter()
            hidden = draft_catch_up(draft, draft_cache, cursor, config.math)  # 1
            proposal = draft_chain(draft, draft_cache, hidden, cursor.position - 1, config, history)  # 2
            draft_ms = _elapsed_ms(started, device)

            started = time.perf_counter()
            verdict = verify(
                target,
                wiring,
                target_cache,
                cursor,
                proposal.drafted_ids,
                None if history is None else (history, config.penalties),
            )  # 3, 4
            roll_back(target_cache, draft_cache, cursor, verdict.accepted)  # 5
            verify_ms = _elapsed_ms(started, device)

            committed, finished = commit_within_budget(
                verdict.emitted, cursor.produced, eos, config.max_new_tokens
            )  # 6
            yield step_record(
                step_index, cursor, proposal, verdict, committed, draft_ms, verify_ms, config.record
            )  # 7
            if finished:
                return
            if history is not None:
                history.add(committed)
            cursor = Cursor(
                cursor.position + verdict.accepted + 1,
                verdict.bonus,
                cursor.produced + len(committed),
                verdict.features,
                verdict.emitted,
                cursor.position,
            )


def first_token(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None) -> int:
    """The token after the prompt: the argmax, or a draw from the target's distribution (SGLang's
    sampler by inverse CDF with one coin; vLLM's by an exponential race)."""
    if sampling.greedy or sampling.top_k == 1:
        return int(logits.argmax())
    probs = target_distribution(logits[None], sampling)[0].cpu()
    if sampling.rule == "vllm":
        return exponential_race(probs, generator)
    return inverse_cdf(probs, float(torch.rand(1, generator=generator, dtype=torch.float32)))


def tree_step(
    target: Target,
    draft: Eagle3Draft,
    wiring: Wiring,
    caches: Caches,
    cursor: Cursor,
    config: ReplayConfig,
    generator: torch.Generator | None,
    step_index: int,
) -> tuple[StepRecord, Cursor | None]:
    """One verify step of a tree (or a sampled chain). Returns the record and the next cursor
    (None when the replay is finished)."""
    device, target_cache, draft_cache = target.device, caches.target, caches.draft
    started = time.perf_counter()
    hidden = draft_catch_up(draft, draft_cache, cursor, config.math)
    tree = draft_tree(draft, draft_cache, hidden, cursor.position - 1, config)
    draft_ms = _elapsed_ms(started, device)

    started = time.perf_counter()
    ids = torch.tensor([[cursor.pending, *tree.tokens]], device=device)
    depths = torch.tensor([0, *tree.depths])
    output = target.runner.forward(
        ids, target_cache, cursor.position, (depths, tree.visible()), capture=wiring.aux_hf_indices
    )
    verdict = accept_tree(tree, output.logits[0].cpu(), config.sampling, generator)
    rows = [0] + [node + 1 for node in verdict.accepted_path]
    features = output.features(wiring.aux_hf_indices)[rows]
    target_cache.keep_rows(cursor.position, rows)
    draft_cache.crop(cursor.position)
    verify_ms = _elapsed_ms(started, device)

    emitted = [tree.tokens[node] for node in verdict.accepted_path] + [verdict.bonus]
    committed, finished = commit_within_budget(
        emitted, cursor.produced, set(target.eos_token_ids), config.max_new_tokens
    )
    record = tree_record(
        step_index, cursor, tree, verdict, features, committed, (draft_ms, verify_ms), config
    )
    if finished:
        return record, None
    accepted = len(verdict.accepted_path)
    return record, Cursor(
        cursor.position + accepted + 1,
        verdict.bonus,
        cursor.produced + len(committed),
        features,
        emitted,
        cursor.position,
    )


def tree_record(
    step_index: int,
    cursor: Cursor,
    tree: DraftTree,
    verdict: TreeVerdict,
    features: torch.Tensor,
    committed: list[int],
    times_ms: tuple[float, float],
    config: ReplayConfig,
) -> StepRecord:
    """The step's record: the tree in full, and its main path in the chain-shaped fields
    (`times_ms`: the step's draft and verify milliseconds)."""
    path = main_path(tree, verdict.accepted_path)
    accepted = len(verdict.accepted_path)
    rows = [0] + [node + 1 for node in path]
    recorded = {}
    if config.record:
        hidden = [tree.proposer[node].detach().to("cpu") for node in path]
        width = tree.proposer[0].shape[-1]
        hidden += [torch.zeros(width)] * (config.num_steps - len(hidden))  # no node at that depth
        recorded = dict(
            target_argmax_probs=[verdict.argmax_probs[r] for r in rows],
            draft_probs=[tree.draft_probs[node] for node in path],
            draft_top_ids=[tree.top_ids[node] for node in path],
            draft_top_probs=[tree.top_probs[node] for node in path],
            aux_features=features[: min(len(committed), accepted) + 1].to("cpu"),
            draft_hidden=torch.stack(hidden),
        )
    return StepRecord(
        step_index,
        cursor.position,
        cursor.pending,
        [tree.tokens[node] for node in path],
        accepted,
        verdict.bonus,
        committed,
        [verdict.argmax[r] for r in rows],
        *times_ms,
        tree=tree_dict(tree, verdict),
        **recorded,
    )


def tree_dict(tree: DraftTree, verdict: TreeVerdict) -> dict:
    """The stored and exported form of a step's tree (`replay --json` "tree")."""
    return {
        "tokens": list(tree.tokens),
        "parents": list(tree.parents),
        "scores": list(tree.scores),
        "depths": list(tree.depths),
        "accepted_path": list(verdict.accepted_path),
        "draft_probs": list(tree.draft_probs),
        "target_probs": list(verdict.target_probs),
        "accept_probs": list(verdict.accept_probs),
        "draws": list(verdict.draws),
        "decisions": list(verdict.decisions),
        "expected_accepted": expected_accepted(tree, verdict.accept_probs),
        "argmax": list(verdict.argmax),  # the target's argmax at each verify row (0 = the root)
        "argmax_probs": list(verdict.argmax_probs),
        "final_draw": verdict.final_draw,
    }


def output_ids_of(records: list[PrefillRecord | StepRecord]) -> list[int]:
    """The generated ids after the prompt: the prefill's greedy token, then each step's committed ids."""
    output: list[int] = []
    for record in records:
        output.extend([record.first_token] if isinstance(record, PrefillRecord) else record.committed_ids)
    return output


def accept_lengths(
    target: Target,
    draft: Eagle3Draft,
    prompt_ids: list[int],
    wiring: Wiring,
    num_steps: int,
    max_new_tokens: int,
    math: DraftMath | None = None,
) -> list[int]:
    """The accepted count a of every verify step of an unrecorded replay (for live accept lengths)."""
    config = ReplayConfig(num_steps, max_new_tokens, record=False, math=math)
    return [
        r.accepted_count
        for r in replay(target, draft, prompt_ids, wiring, config)
        if isinstance(r, StepRecord)
    ]


def _elapsed_ms(started: float, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - started) * 1000.0
