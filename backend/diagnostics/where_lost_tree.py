"""Where a draft loses acceptance in trees and sampled runs, beside where_lost.py's chain view: per tree
depth, which sibling the target accepted (the draft's favourite, or one a chain would not have drafted)
or that it accepted none of them; per position of sampled runs, the acceptance the draws realised beside
the acceptance expected from the recorded probabilities (lower variance than the draws).

The unit is the same ATTEMPT as where_lost.py's: depth d of a verify step whose path reached depth d - 1,
where the target judged the children of the last accepted node (the root x_n at depth 1). Siblings rank
by the draft's path score (its draft probability where no score was stored), 0 = its favourite.
Torch-free: stored steps only."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from backend.plain import Plain

RANKS = 3  # ranks 0, 1 and "2 or later" are counted apart


@dataclass(frozen=True)
class TreeDepth(Plain):
    """One tree depth over a draft's tree steps: how the target's judgements there ended."""

    depth: int
    attempts: int  # steps whose path reached depth - 1 and whose tree had children there
    accepted_by_rank: list[int] = field(default_factory=list)  # [rank 0, rank 1, rank 2 or later]
    rejected: int = 0  # none of the siblings accepted
    siblings: float | None = None  # mean number of siblings judged at this depth


@dataclass(frozen=True)
class SampledPosition(Plain):
    """One draft position over a draft's sampled steps: the rate the draws realised and the rate the
    recorded P(accepted | parent accepted) expected, over the same attempts."""

    position: int
    attempts: int
    realized: float
    expected: float


def tree_depths(steps) -> list[TreeDepth]:
    """Per depth over the tree steps (some node with two or more children) of `steps`; [] for chains."""
    counts: dict[int, list[int]] = defaultdict(lambda: [0] * (RANKS + 2))  # attempts, ranks.., siblings
    for step in steps:
        tree = getattr(step, "tree", None)
        if tree is None or not _branches(tree.parents):
            continue
        children = defaultdict(list)
        for node, parent in enumerate(tree.parents):
            children[parent].append(node)
        weight = tree.scores if len(tree.scores) == len(tree.tokens) else tree.draft_probs
        parent = -1
        for depth in range(1, len(tree.accepted_path) + 2):
            judged = children.get(parent, [])
            if not judged:
                break  # the tree ends here: nothing was judged at this depth
            row = counts[depth]
            row[0] += 1
            row[RANKS + 1] += len(judged)
            if depth > len(tree.accepted_path):
                break  # none accepted: a rejection (attempts less the accepted ranks)
            node = tree.accepted_path[depth - 1]
            order = sorted(judged, key=lambda n: -(weight[n] if n < len(weight) else 0.0))
            row[1 + min(order.index(node), RANKS - 1)] += 1
            parent = node
    return [
        TreeDepth(
            depth,
            row[0],
            row[1 : 1 + RANKS],
            row[0] - sum(row[1 : 1 + RANKS]),
            row[RANKS + 1] / row[0],
        )
        for depth, row in sorted(counts.items())
    ]


def _branches(parents: list[int]) -> bool:
    """Whether some node has two or more children (a tree, not a chain)."""
    return len(set(parents)) < len(parents)


def sampled_positions(steps) -> list[SampledPosition]:
    """Per position over the sampled steps (a draw recorded) of `steps`: realised vs expected acceptance
    along the accepted path and the first judged node after it."""
    sums: dict[int, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])  # attempts, accepted, expected
    for step in steps:
        tree = getattr(step, "tree", None)
        if tree is None or not any(d is not None for d in tree.draws) or _branches(tree.parents):
            continue  # greedy, or a sampled tree (its siblings' draws are not one attempt each)
        path = list(tree.accepted_path)
        for node in range(len(tree.tokens)):  # a chain: node i drafts position i + 1
            if node >= len(tree.accept_probs) or tree.accept_probs[node] is None:
                break
            row = sums[node + 1]
            row[0] += 1
            row[1] += node in path
            row[2] += tree.accept_probs[node]
            if node not in path:
                break
    return [
        SampledPosition(position, int(row[0]), row[1] / row[0], row[2] / row[0])
        for position, row in sorted(sums.items())
        if row[0]
    ]
