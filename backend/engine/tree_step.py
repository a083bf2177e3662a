"""One verify step of a tree (topk > 1) or of a sampled chain: the draft proposes a tree
(backend/engine/tree.py), the target verifies it in one forward under a tree mask, the acceptance
rule walks it (greedy, or an engine's sampling rule: backend/engine/sampling.py), and the caches keep
the root and the accepted path."""

from __future__ import annotations

import time

import torch

from backend.drafts.dflash_config import DFLASH
from backend.engine.draft_model import Eagle3Draft
from backend.engine.loading import Target
from backend.engine.sampling import near_tie_rows
from backend.engine.step_state import (
    Caches,
    Cursor,
    ReplayConfig,
    commit_within_budget,
    draft_catch_up,
    elapsed_ms,
)
from backend.engine.tree import (
    DraftTree,
    TreeVerdict,
    accept_tree,
    draft_tree,
    expected_accepted,
    main_path,
)
from backend.run.records import StepRecord, StepTree
from backend.run.wiring import Wiring


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
    if getattr(draft.config, "method", None) == DFLASH:  # a block: the chain of its K drafts
        tree = block_tree(draft, draft_cache, cursor, config)
    else:
        hidden = draft_catch_up(draft, draft_cache, cursor, config.math)
        tree = draft_tree(draft, draft_cache, hidden, cursor.position - 1, config)
    draft_ms = elapsed_ms(started, device)

    started = time.perf_counter()
    ids = torch.tensor([[cursor.pending, *tree.tokens]], device=device)
    depths = torch.tensor([0, *tree.depths])
    output = target.runner.forward(
        ids, target_cache, cursor.position, (depths, tree.visible()), capture=wiring.aux_hf_indices
    )
    over_trace = output.known is not None  # the trace's greedy path: sampled acceptance is expected only
    verdict = accept_tree(tree, output.logits[0].cpu(), config.sampling, generator, greedy_path=over_trace)
    if output.known is not None:
        unrecorded(tree, verdict, output.known)
    rows = [0] + [node + 1 for node in verdict.accepted_path]
    features = output.features(wiring.aux_hf_indices)[rows]
    target_cache.keep_rows(cursor.position, rows)
    draft_cache.crop(cursor.position)
    verify_ms = elapsed_ms(started, device)

    emitted = [tree.tokens[node] for node in verdict.accepted_path] + [verdict.bonus]
    committed, finished = commit_within_budget(
        emitted, cursor.produced, config.stops(target.eos_token_ids), config.max_new_tokens
    )
    record = tree_record(
        step_index, cursor, tree, verdict, features, committed, (draft_ms, verify_ms), config
    )
    # the near-ties among the rows the output read: the root, then the accepted path (chain-shaped)
    record.near_tie_rows = near_tie_rows(output.logits[0][rows], len(rows))
    if finished:
        return record, None
    return record, cursor.after(emitted, committed, features)


def block_tree(draft, cache, cursor: Cursor, config: ReplayConfig) -> DraftTree:
    """A DFlash step's block as the chain the sampled acceptance walks (dflash_step.propose_block: the
    drafts are the block's argmaxes whatever the temperature, as z-lab, vLLM and llama.cpp draft them)."""
    from backend.engine.dflash_step import DFlashChain, propose_block

    DFlashChain.extend_context(draft, cache, cursor)
    proposal = propose_block(draft, cache, cursor.pending, cursor.position, config.num_steps, config)
    scores, running = [], 1.0
    for p in proposal.probs:
        running *= p
        scores.append(running)
    count = len(proposal.drafted_ids)
    return DraftTree(
        tokens=list(proposal.drafted_ids),
        parents=list(range(-1, count - 1)),
        scores=scores,
        depths=list(range(1, count + 1)),
        draft_probs=list(proposal.probs),
        top_ids=list(proposal.top_ids) or [[t] for t in proposal.drafted_ids],
        top_probs=list(proposal.top_probs) or [[p] for p in proposal.probs],
        proposer=list(proposal.hidden),
    )


def unrecorded(tree: DraftTree, verdict: TreeVerdict, known: list[bool]) -> None:
    """Blank what the verdict read from rows no target computed (a tree over a trace): their argmax,
    probability and entropy, and their children's probabilities (None: "not recorded")."""
    for row, computed in enumerate(known):
        if not computed:
            verdict.argmax[row] = verdict.argmax_probs[row] = verdict.entropies[row] = None
    for node, parent in enumerate(tree.parents):
        if not known[parent + 1]:
            verdict.target_probs[node] = verdict.accept_probs[node] = None


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
    # the probabilities every run keeps (where acceptance is lost reads them: diagnostics/where_lost.py)
    recorded = dict(
        target_argmax_probs=[verdict.argmax_probs[r] for r in rows],
        draft_probs=[tree.draft_probs[node] for node in path],
    )
    if config.record:
        hidden = [tree.proposer[node].detach().to("cpu") for node in path]
        width = tree.proposer[0].shape[-1]
        hidden += [torch.zeros(width)] * (config.num_steps - len(hidden))  # no node at that depth
        recorded |= dict(
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
        tree=step_tree(tree, verdict),
        **recorded,
    )


def step_tree(tree: DraftTree, verdict: TreeVerdict) -> StepTree:
    """The stored and exported form of a step's tree (`replay --json` "tree")."""
    return StepTree(
        tokens=list(tree.tokens),
        parents=list(tree.parents),
        scores=list(tree.scores),
        depths=list(tree.depths),
        accepted_path=list(verdict.accepted_path),
        draft_probs=list(tree.draft_probs),
        target_probs=list(verdict.target_probs),
        accept_probs=list(verdict.accept_probs),
        draws=list(verdict.draws),
        decisions=list(verdict.decisions),
        expected_accepted=expected_accepted(tree, verdict.accept_probs),
        argmax=list(verdict.argmax),  # the target's argmax at each verify row (0 = the root)
        argmax_probs=list(verdict.argmax_probs),
        target_entropies=list(verdict.entropies),
        final_draw=verdict.final_draw,
    )
