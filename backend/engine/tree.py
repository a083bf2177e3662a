"""Tree drafting (topk > 1) and tree verification, as SGLang runs them (docs/reference.md §12).

Flags: `--speculative-num-steps` S, `--speculative-eagle-topk` k, `--speculative-num-draft-tokens` N.

Drafting (SGLang v0.5.12, python/sglang/srt/speculative/eagle_worker.py `EAGLEWorker.draft_forward`
with spec_utils.py `select_top_k_tokens`):
  - step 0 (`_select_top_k_tokens_first`): the top-k tokens of softmax(draft logits) at the catch-up
    output (no temperature); their scores are those probabilities;
  - step i >= 1 (`_select_top_k_tokens_later`): the k frontier nodes run one draft forward, each fed
    (the draft's output hidden at its parent, its own token) at RoPE position n-1+i; every frontier
    node proposes its top-k children with score = parent score x child probability; all k*k
    children are candidates, and the global top-k of them by score is the next frontier.
  - `eagle_utils.organize_draft_results`: the N-1 best candidates by score, their flat indices sorted
    ascending (depth-major, then frontier rank, then child rank), form the tree below the root.
  - sgl-kernel eagle_utils.cu `build_tree_efficient`: the root is the pending token x_n at position
    n, node positions are n + depth, each node sees the prefix, the root and its ancestors; siblings
    are linked in ascending slot order (highest draft probability first). A node whose parent was
    not selected ("invalid eagle tree") is skipped.
Verify: one target forward over [x_n, nodes] with that mask; greedy acceptance (`VerifyTreeGreedy`)
walks from the root taking the child whose token equals the target's argmax at its parent; the bonus
is the argmax at the last accepted node. Sampled acceptance: backend/engine/sampling.py.

Draft attention, where SGLang and the path semantics disagree: SGLang's draft forwards read the KV
slots of their frontier *rank* (spec_utils.py `assign_draft_cache_locs` and
`generate_draft_decode_kv_indices` index by topk_id; `_select_top_k_tokens_later` re-gathers only
the hidden states), so from the second forward on a node whose parent held another rank attends to
that rank's tokens, not its own ancestors. Only the verify uses the true tree. SpecLens drafts
against the true ancestors by default ("ancestors": a node's draft distribution is the one the
draft gives its whole path) and runs SGLang's slots when asked ("sglang-slots"). Either way
nothing is recomputed per node: each forward appends k entries to the draft KV cache under a mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from backend.engine.draft_model import Eagle3Draft
from backend.engine.sampling import (
    Sampling,
    exponential_race,
    inverse_cdf,
    row_entropies,
    sibling_accept_probability,
    target_distribution,
)
from backend.run.shapes import TreeShape
from backend.target.kv_cache import KVCache

if TYPE_CHECKING:
    from backend.engine.step_state import ReplayConfig


@dataclass
class DraftTree:
    """The tree below the root, in SGLang's slot order. Index i is node i; parents[i] = -1 when the
    node hangs from the root."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    draft_probs: list[float] = field(default_factory=list)  # the draft's probability given the parent
    top_ids: list[list[int]] = field(default_factory=list)  # alternatives at the parent (recorded)
    top_probs: list[list[float]] = field(default_factory=list)
    proposer: list[torch.Tensor] = field(default_factory=list)  # draft output hidden at the parent

    def children(self) -> list[list[int]]:
        """children[0] = the root's, children[i + 1] = node i's, each in sibling order."""
        kids: list[list[int]] = [[] for _ in range(len(self.tokens) + 1)]
        for node, parent in enumerate(self.parents):
            kids[parent + 1].append(node)
        return kids

    def visible(self) -> torch.Tensor:
        """[N, N] bool over verify rows (row 0 = the root, row i + 1 = node i): self and ancestors."""
        size = len(self.tokens) + 1
        seen = torch.zeros(size, size, dtype=torch.bool)
        seen[:, 0] = True
        for node in range(len(self.tokens)):
            walk = node
            while walk != -1:
                seen[node + 1, walk + 1] = True
                walk = self.parents[walk]
        return seen


@dataclass
class _Candidate:
    token: int
    score: float
    parent: int  # candidate index, -1 = the root
    depth: int
    prob: float
    proposer_row: int  # row of the hidden batch that proposed it
    proposer_batch: int  # which forward's hidden batch (0 = the catch-up output)
    top_ids: list[int] | None = None
    top_probs: list[float] | None = None
    cache_entry: int | None = None  # draft cache index once it has been fed as a frontier node


def draft_tree(
    draft: Eagle3Draft, cache: KVCache, hidden: torch.Tensor, position: int, config: ReplayConfig
) -> DraftTree:
    """Propose the tree of one step of `config` (its shape, draft math, recording, alternatives
    and draft attention). `hidden` [1, H] is the catch-up output at `position` (= n-1); the draft
    cache holds the committed prefix and gains k entries per draft forward (cropped by the caller
    after the verify)."""
    shape, math, record = config.shape, config.math, config.record
    top_alternatives, attention = config.top_alternatives, config.draft_attention
    k = shape.topk
    batches = [hidden[-1:]]  # output hidden of each forward; candidates point into them
    candidates: list[_Candidate] = []

    def propose(
        batch: int, parents: list[int], parent_scores: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k children of every row of batch `batch`: (scores [rows, k], candidate indices)."""
        probs = torch.softmax(draft.logits(batches[batch], math), dim=-1)
        width = max(k, top_alternatives) if record else k
        top = probs.topk(min(width, probs.shape[-1]), dim=-1)  # sorted, descending (fast_topk)
        child_p, child_draft_ids = top.values[:, :k], top.indices[:, :k]
        child_ids = draft.to_target_ids(child_draft_ids).tolist()  # hot_token_id / d2t
        expanded = parent_scores[:, None] * child_p
        values = expanded.tolist()
        probs_list = child_p.tolist()
        alternatives = draft.to_target_ids(top.indices).tolist() if record else None
        alt_probs = top.values[:, :top_alternatives].tolist() if record else None
        first = len(candidates)
        for row, parent in enumerate(parents):
            for rank in range(k):
                candidates.append(
                    _Candidate(
                        child_ids[row][rank],
                        values[row][rank],
                        parent,
                        (candidates[parent].depth if parent >= 0 else 0) + 1,
                        probs_list[row][rank],
                        row,
                        batch,
                        alternatives[row][:top_alternatives] if record else None,
                        alt_probs[row] if record else None,
                    )
                )
        return expanded, torch.arange(first, first + len(parents) * k).view(len(parents), k)

    device = hidden.device
    expanded, index = propose(0, [-1], torch.ones(1, device=device))
    frontier = index[0].tolist()  # step 0: the k children of the root, in rank order
    scores = expanded[0]
    starts: list[int] = []  # the draft cache index where each forward's k entries begin
    for step in range(1, shape.num_steps):
        fed = torch.cat(
            [batches[candidates[c].proposer_batch][candidates[c].proposer_row][None] for c in frontier]
        )
        tokens = torch.tensor([candidates[c].token for c in frontier], device=device)
        start = cache.length
        if k == 1:
            mask = None  # one query: it sees every entry, as in the chain
        elif attention == "sglang-slots":
            mask = _slot_mask(starts, start, k, device)
        else:
            mask = _frontier_mask(candidates, frontier, start, device)
        starts.append(start)
        for offset, c in enumerate(frontier):
            candidates[c].cache_entry = start + offset
        out = draft(
            draft.feedback(fed, math),
            tokens,
            torch.full((len(frontier),), position + step, device=device),
            cache,
            mask=mask,
            math=math,
        )
        batches.append(out)
        expanded, index = propose(len(batches) - 1, frontier, scores)
        kept = expanded.flatten().topk(k)  # fast_topk over the k*k children
        frontier = index.flatten()[kept.indices].tolist()
        scores = kept.values
    return _organize(candidates, batches, shape, record)


def _frontier_mask(candidates: list[_Candidate], frontier: list[int], start: int, device) -> torch.Tensor:
    """[k, start + k]: every committed entry, then each node's ancestors' entries and its own."""
    mask = torch.zeros(len(frontier), start + len(frontier), dtype=torch.bool, device=device)
    mask[:, :start] = True
    ancestor_entries: list[list[int]] = []
    for c in frontier:
        entries, walk = [], candidates[c].parent
        while walk != -1:
            entries.append(candidates[walk].cache_entry)
            walk = candidates[walk].parent
        ancestor_entries.append(entries)
    for row, entries in enumerate(ancestor_entries):
        mask[row, entries] = True
        mask[row, start + row] = True
    return mask


def _slot_mask(starts: list[int], start: int, k: int, device) -> torch.Tensor:
    """[k, start + k]: SGLang's draft decode kv_indices: the prefix, then the entries that frontier
    rank b wrote in every earlier forward, then its own (generate_draft_decode_kv_indices)."""
    mask = torch.zeros(k, start + k, dtype=torch.bool, device=device)
    prefix = starts[0] if starts else start
    mask[:, :prefix] = True
    for rank in range(k):
        for earlier in [*starts, start]:
            mask[rank, earlier + rank] = True
    return mask


def _organize(candidates: list[_Candidate], batches, shape: TreeShape, record: bool) -> DraftTree:
    """organize_draft_results: the N-1 best candidates by score, in ascending candidate order."""
    scores = torch.tensor([c.score for c in candidates], dtype=torch.float64)
    chosen = sorted(scores.topk(shape.num_draft_tokens - 1).indices.tolist())
    slot = {}
    tree = DraftTree()
    for c in chosen:
        candidate = candidates[c]
        if candidate.parent != -1 and candidate.parent not in slot:
            continue  # build_tree_efficient: "invalid eagle tree", the node is skipped
        slot[c] = len(tree.tokens)
        tree.tokens.append(candidate.token)
        tree.parents.append(-1 if candidate.parent == -1 else slot[candidate.parent])
        tree.scores.append(candidate.score)
        tree.depths.append(candidate.depth)
        tree.draft_probs.append(candidate.prob)
        if record:
            tree.top_ids.append(candidate.top_ids)
            tree.top_probs.append(candidate.top_probs)
        tree.proposer.append(batches[candidate.proposer_batch][candidate.proposer_row])
    return tree


@dataclass
class TreeVerdict:
    """What the verify forward and the acceptance rule decided for one tree."""

    accepted_path: list[int]  # node indices, root's child first
    bonus: int
    argmax: list[int]  # target argmax at every verify row (0 = root)
    argmax_probs: list[float]  # its probability at temperature 1
    target_probs: list[float]  # per node: the target's probability of the node's token at its parent
    accept_probs: list[float]  # per node: P(accepted | parent accepted)
    draws: list[float | None]  # per node: the random number its decision used
    decisions: list[str]  # per node: accepted | rejected | unreached
    final_draw: float | None = None
    entropies: list[float] = field(default_factory=list)  # the target's, nats, at every verify row


def accept_tree(
    tree: DraftTree,
    logits: torch.Tensor,
    sampling: Sampling,
    generator: torch.Generator | None,
    greedy_path: bool = False,
) -> TreeVerdict:
    """Walk the verified tree from the root. logits [N, V] are the verify rows. `greedy_path` (a replay
    over a trace, which holds the target's greedy path only): each node's acceptance probability under
    `sampling`, the walk along the greedy path (the step's expected acceptance, not a draw)."""
    plain = torch.softmax(logits.float(), dim=-1)
    top = plain.max(-1)
    argmax = top.indices.tolist()
    children = tree.children()
    greedy = sampling.greedy or sampling.top_k == 1  # SGLang: top_k <= 1 is greedy (is_all_greedy)
    probs = plain if greedy else target_distribution(logits, sampling)
    node_rows = torch.tensor([p + 1 for p in tree.parents], dtype=torch.long)
    token_index = torch.tensor(tree.tokens, dtype=torch.long)
    at_parent = (
        (probs[node_rows.to(probs.device), token_index.to(probs.device)]).tolist() if tree.tokens else []
    )
    verdict = TreeVerdict(
        [],
        0,
        argmax,
        top.values.tolist(),
        at_parent,
        [0.0] * len(tree.tokens),
        [None] * len(tree.tokens),
        ["unreached"] * len(tree.tokens),
        entropies=row_entropies(plain),
    )
    for row, kids in enumerate(children):
        sibling_probs = [at_parent[c] for c in kids]
        for rank, c in enumerate(kids):
            if greedy:
                verdict.accept_probs[c] = float(tree.tokens[c] == argmax[row])
            else:
                verdict.accept_probs[c] = sibling_accept_probability(sibling_probs, rank, sampling)
    if greedy or greedy_path:
        _walk_greedy(tree, children, argmax, verdict)
    elif sampling.rule == "vllm":
        _walk_vllm(tree, children, probs, generator, verdict)
    else:
        _walk_sglang(tree, children, probs, sampling, generator, verdict)
    return verdict


def _walk_greedy(tree: DraftTree, children, argmax: list[int], verdict: TreeVerdict) -> None:
    """sgl-kernel eagle_utils.cu `VerifyTreeGreedy`: the first sibling equal to the argmax."""
    row = 0
    while True:
        chosen = None
        for c in children[row]:
            if tree.tokens[c] == argmax[row]:
                chosen = c
                verdict.decisions[c] = "accepted"
                break
            verdict.decisions[c] = "rejected"
        if chosen is None:
            break
        verdict.accepted_path.append(chosen)
        row = chosen + 1
    verdict.bonus = argmax[row]


def _walk_sglang(tree, children, probs, sampling: Sampling, generator, verdict: TreeVerdict) -> None:
    """sgl-kernel speculative_sampling.cuh `TreeSpeculativeSamplingTargetOnly`: one coin per node,
    siblings tried in order against the running sum of their target probabilities; the final token
    from relu(p - q) with the rejected siblings' mass moved into q, by inverse CDF."""
    coins = torch.rand(len(tree.tokens) + 1, generator=generator, dtype=torch.float32).tolist()
    final_coin = float(torch.rand(1, generator=generator, dtype=torch.float32))
    row, coin, rejected = 0, coins[0], []
    while True:
        chosen, prob_acc = None, 0.0
        for c in children[row]:
            p = verdict.target_probs[c]
            prob_acc += p
            verdict.draws[c] = coin
            if coin <= prob_acc / sampling.threshold_acc or p >= sampling.threshold_single:
                chosen = c
                verdict.decisions[c] = "accepted"
                break
            verdict.decisions[c] = "rejected"
            rejected.append(tree.tokens[c])
        if chosen is None:
            break
        verdict.accepted_path.append(chosen)
        row, coin, rejected = chosen + 1, coins[chosen + 1], []
    residual = probs[row].clone()
    if rejected:
        residual[rejected] = 0.0
    verdict.final_draw = final_coin
    verdict.bonus = (
        inverse_cdf(residual, final_coin) if float(residual.sum()) > 0 else int(probs[row].argmax())
    )


def _walk_vllm(tree, children, probs, generator, verdict: TreeVerdict) -> None:
    """vllm/v1/sample/rejection_sampler.py `rejection_random_sample_kernel` with no draft probs: a
    uniform per position, accept while p(d) >= u; the recovered token is an exponential race over p
    without d (`sample_recovered_tokens`); the bonus one over p (the sampler). Chains only."""
    if any(len(kids) > 1 for kids in children):
        raise ValueError("vLLM's rejection sampler verifies chains only (topk 1)")
    uniforms = torch.rand(len(tree.tokens), generator=generator, dtype=torch.float64).tolist()
    row = 0
    while children[row]:
        c = children[row][0]
        verdict.draws[c] = uniforms[c]
        if verdict.target_probs[c] > 0 and verdict.target_probs[c] >= uniforms[c]:
            verdict.decisions[c] = "accepted"
            verdict.accepted_path.append(c)
            row = c + 1
            continue
        verdict.decisions[c] = "rejected"
        recovered = probs[row].clone()
        recovered[tree.tokens[c]] = 0.0
        verdict.bonus = exponential_race(recovered, generator)
        return
    verdict.bonus = exponential_race(probs[row], generator)


def expected_accepted(tree: DraftTree, accept_probs: list[float]) -> float:
    """E[accepted drafts] = sum over nodes of the product of P(accepted | parent accepted) along
    the node's path (every ancestor must be accepted first). None (a node below a row no target
    computed, over a trace) counts 0: a node on its path was rejected already."""
    reach = []
    for node, parent in enumerate(tree.parents):
        reach.append((accept_probs[node] or 0.0) * (reach[parent] if parent >= 0 else 1.0))
    return float(sum(reach))


def main_path(tree: DraftTree, accepted_path: list[int]) -> list[int]:
    """The accepted path, continued by the first child (the draft's favourite) down to a leaf:
    the branch a step's chain-shaped fields (drafted_ids, ...) describe. For a chain: the chain."""
    children = tree.children()
    path = list(accepted_path)
    row = path[-1] + 1 if path else 0
    while children[row]:
        path.append(children[row][0])
        row = children[row][0] + 1
    return path
