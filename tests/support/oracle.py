"""A slow, cache-free reference of greedy chain speculative decoding, for checking the replay.

Every draft and target forward recomputes the whole sequence from scratch, so nothing here depends
on KV caches, cache cropping or the draft's catch-up bookkeeping that the replay uses.
"""

from __future__ import annotations

import torch

from backend.engine.chain_step import accepted_prefix_length
from backend.target.capture import AuxCapture


@torch.inference_mode()
def plain_greedy(target, prompt: list[int], max_new_tokens: int) -> list[int]:
    """The target's own greedy output through transformers' `generate`: what a replay must equal."""
    out = target.model.generate(
        torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0
    )
    return out[0, len(prompt) :].tolist()


def _full_forward(target, wiring, tokens: list[int]):
    """(logits [T, V], fused aux features) of one cache-free forward over `tokens`."""
    with AuxCapture(target.model, wiring.aux_hf_indices) as capture:
        logits = target.model(input_ids=torch.tensor([tokens])).logits[0]
        return logits, capture.features()


@torch.inference_mode()
def oracle_replay(target, draft, prompt: list[int], wiring, num_steps: int, max_new_tokens: int):
    """Returns (output_ids, [(drafted_ids, accepted_count), ...])."""
    eos = set(target.eos_token_ids)

    def full(tokens):
        return _full_forward(target, wiring, tokens)

    logits, _ = full(prompt)
    tokens = list(prompt) + [int(logits[-1].argmax())]
    output, steps = [tokens[-1]], []
    while output[-1] not in eos and len(output) < max_new_tokens:
        n = len(tokens) - 1  # the pending token's position
        _, features = full(tokens[:n])
        prefix_hidden = draft.fuse(features)
        prefix_tokens = tokens[1 : n + 1]
        chain_hidden, chain_tokens, drafted = [], [], []
        hidden_in, tokens_in = prefix_hidden, prefix_tokens
        for _ in range(num_steps):
            out = draft(hidden_in, torch.tensor(tokens_in), torch.arange(len(tokens_in)))
            last = out[-1:]
            drafted.append(int(draft.to_target_ids(draft.logits(last)[-1].argmax())))
            chain_hidden.append(last)
            chain_tokens.append(drafted[-1])
            hidden_in = torch.cat([prefix_hidden, *chain_hidden])
            tokens_in = prefix_tokens + chain_tokens
        verify_logits, _ = full(tokens + drafted)
        argmax = verify_logits[n : n + num_steps + 1].argmax(-1).tolist()
        accepted = accepted_prefix_length(drafted, argmax)
        steps.append((drafted, accepted))
        for token in drafted[:accepted] + [argmax[accepted]]:
            tokens.append(token)
            output.append(token)
            if token in eos or len(output) >= max_new_tokens:
                break
    return output, steps


@torch.inference_mode()
def oracle_tree_replay(
    target,
    draft,
    prompt: list[int],
    wiring,
    num_steps: int,
    topk: int,
    num_draft_tokens: int,
    max_new_tokens: int,
):
    """SGLang's tree rule (top-k children, global top-k frontier by cumulative probability, the
    N-1 best candidates in candidate order) with every distribution recomputed from scratch: a
    node's children come from the draft run over prefix + the node's whole path, and the target's
    argmax at a node from a full forward over prefix + path. Greedy acceptance from the root.
    Returns (output_ids, [(tokens, parents, accepted_path), ...])."""
    eos = set(target.eos_token_ids)

    def full(tokens):
        return _full_forward(target, wiring, tokens)

    logits, _ = full(prompt)
    tokens = list(prompt) + [int(logits[-1].argmax())]
    output, steps = [tokens[-1]], []
    while output[-1] not in eos and len(output) < max_new_tokens:
        n = len(tokens) - 1
        _, features = full(tokens[:n])
        prefix_hidden, prefix_tokens = draft.fuse(features), tokens[1 : n + 1]

        def children_of(
            path_hidden, path_tokens, prefix_hidden=prefix_hidden, prefix_tokens=prefix_tokens, n=n
        ):
            """(output hidden at the path's end, top-k probs, top-k target ids)."""
            out = draft(
                torch.cat([prefix_hidden, *path_hidden]),
                torch.tensor(prefix_tokens + path_tokens),
                torch.arange(n + len(path_tokens)),
            )
            probs = torch.softmax(draft.logits(out[-1:])[-1], -1).topk(topk)
            return out[-1:], probs.values.tolist(), draft.to_target_ids(probs.indices).tolist()

        candidates = _grow_candidates(children_of, topk, num_steps)
        tree_tokens, tree_parents = _choose_nodes(candidates, num_draft_tokens)
        accepted_path, node_path, argmax = _greedy_walk(full, tokens, tree_tokens, tree_parents)
        steps.append((tree_tokens, tree_parents, accepted_path))
        for token in node_path + [argmax]:
            tokens.append(token)
            output.append(token)
            if token in eos or len(output) >= max_new_tokens:
                break
    return output, steps


def _grow_candidates(children_of, topk: int, num_steps: int) -> list[tuple]:
    """Every candidate, (token, score, parent candidate, path hidden, path tokens): the root's top-k
    children, then at each depth the top-k children of every frontier node, the frontier being the
    top-k of those by cumulative probability."""
    root_out, probs, ids = children_of([], [])
    candidates = [(ids[r], probs[r], -1, [root_out], [ids[r]]) for r in range(topk)]
    frontier = list(range(topk))
    for _ in range(1, num_steps):
        expansions = []
        for c in frontier:
            _, score, _, path_hidden, path_tokens = candidates[c]
            out, probs, ids = children_of(path_hidden, path_tokens)
            for r in range(topk):
                expansions.append((ids[r], score * probs[r], c, path_hidden + [out], path_tokens + [ids[r]]))
        first = len(candidates)
        candidates += expansions
        kept = torch.tensor([e[1] for e in expansions]).topk(topk).indices.tolist()
        frontier = [first + i for i in kept]
    return candidates


def _choose_nodes(candidates: list[tuple], num_draft_tokens: int) -> tuple[list[int], list[int]]:
    """(tokens, parents) of the tree: the N-1 best candidates in candidate order, each kept only when
    its parent was."""
    chosen = sorted(
        torch.tensor([c[1] for c in candidates], dtype=torch.float64)
        .topk(num_draft_tokens - 1)
        .indices.tolist()
    )
    slot, tree_tokens, tree_parents = {}, [], []
    for c in chosen:
        token, _, parent, _, _ = candidates[c]
        if parent != -1 and parent not in slot:
            continue
        slot[c] = len(tree_tokens)
        tree_tokens.append(token)
        tree_parents.append(-1 if parent == -1 else slot[parent])
    return tree_tokens, tree_parents


def _greedy_walk(full, tokens: list[int], tree_tokens: list[int], tree_parents: list[int]):
    """(accepted nodes, their tokens, the bonus): from the root, the child whose token is the
    target's argmax after prefix + path (by full forwards), while there is one."""
    accepted_path, node_path = [], []
    while True:
        verify_logits, _ = full(tokens + node_path)
        argmax = int(verify_logits[-1].argmax())
        parent = accepted_path[-1] if accepted_path else -1
        match = [i for i, p in enumerate(tree_parents) if p == parent and tree_tokens[i] == argmax]
        if not match:
            return accepted_path, node_path, argmax
        accepted_path.append(match[0])
        node_path.append(argmax)
