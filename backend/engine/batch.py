"""Replay a set of samples as one batch: the greedy chain of each sample, with the target's verify
forwards of all of them in one forward.

A serving engine verifies many requests in one forward; one sample at a time reads every weight of
the target once per verify step and sample. Here each verify step of the batch runs, per sample, the
draft's catch-up and chain (`Chain.propose`, its own draft cache), then one target forward over every
sample's [x_n, d_1..d_K] (`TargetRunner.forward_rows`: every projection one matrix product over all
rows, attention per sample on its own cache), then, per sample, the judgement, roll-back, commit and
record (`Chain.conclude`). Samples have their own prompts (the prefills run one by one), positions,
caches and acceptance; a sample that finishes leaves the batch, and samples drafting fewer tokens this
step (llama.cpp's reading near the budget) verify in a forward of their own length.

Each sample's records are the records of its replay alone except for the arithmetic: a matrix product
over more rows may round differently in the last place, so where the top two logits of a verify row
nearly tie, batching could move the argmax, as a verify chunk can against 1-token decodes
(backend/diagnostics/precision.py). In fp32 on the CPU the tests find every sample equal to its lone
replay, tokens and per-step counts: tests/engine/test_batch.py on the test pairs, tests/test_demo.py
on the toy pair (3 prompts x 96 tokens) and the real pair (6 prompts x 48 tokens, drafts too).
Each step's verify time is the batch forward's time shared evenly among its samples.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from backend.drafts.engine_readers import DraftMath
from backend.engine.chain_step import Chain, DraftedStep, Proposal, draft_chains
from backend.engine.draft_model import Eagle3Draft
from backend.engine.loading import Target
from backend.engine.replay import Prefill, prefilled
from backend.engine.step_state import ReplayConfig, draft_catch_ups, elapsed_ms
from backend.run.records import PrefillRecord, StepRecord
from backend.run.wiring import Wiring


def batchable(config: ReplayConfig) -> bool:
    """Whether replays with these settings can run batched: the greedy chain (trees and sampled
    acceptance run one sample at a time)."""
    return not config.uses_tree_path


def replay_batch(
    target: Target,
    draft: Eagle3Draft,
    wiring: Wiring | list[Wiring],
    prompts: list[list[int]],
    configs: list[ReplayConfig],
) -> Iterator[tuple[int, PrefillRecord | StepRecord, bool]]:
    """Yield (the prompt's index, its record, whether it was the prompt's last): each prompt's
    PrefillRecord, then its StepRecords, the verify steps of all prompts still running batched
    together, until each ends at EOS or its max_new_tokens. Prompt i replays with configs[i] (its
    budget, K, reading) and `wiring` (one for all, or wiring[i]: the wiring probe replays every
    candidate of a draft in one batch, the target capturing the union of their layers); every
    prompt gets the records its `replay` alone would yield."""
    if not all(batchable(config) for config in configs):
        raise ValueError("only the greedy chain replays batched (topk 1, temperature 0)")
    if any(not prompt for prompt in prompts):
        raise ValueError("a prompt is empty")
    wirings = wiring if isinstance(wiring, list) else [wiring] * len(prompts)
    if len(wirings) != len(prompts):
        raise ValueError(f"{len(wirings)} wirings for {len(prompts)} prompts")
    captured = tuple(sorted({i for w in wirings for i in w.aux_hf_indices}))
    with torch.inference_mode():
        running: dict[int, Chain] = {}
        for group in prefill_groups([len(prompt) for prompt in prompts]):
            started = time.perf_counter()
            caches = [target.runner.new_cache() for _ in group]
            outputs = target.runner.forward_many(
                [prompts[index] for index in group],
                caches,
                [0] * len(group),
                capture=captured,
                last_logits=True,
            )
            elapsed = elapsed_ms(started, target.device)
            tokens = sum(len(prompts[index]) for index in group)
            for index, cache, output in zip(group, caches, outputs, strict=True):
                share = elapsed * len(prompts[index]) / tokens  # each prefill's time: its share of the rows
                prefill = Prefill(prompts[index], cache, output, share)
                record, chain = prefilled(target, draft, wirings[index], configs[index], prefill)
                yield index, record, chain.cursor is None
                if chain.cursor is not None:
                    running[index] = chain
        while running:
            proposed = propose_all(draft, running)
            started = time.perf_counter()
            members, chains = list(running), list(running.values())
            outputs = target.runner.forward_many(
                [chain.verify_ids(proposed[index]) for index, chain in running.items()],
                [chain.caches.target for chain in chains],
                [chain.cursor.position for chain in chains],
                capture=captured,
            )
            share = elapsed_ms(started, target.device) / len(members)
            for index, chain, output in zip(members, chains, outputs, strict=True):
                record = chain.conclude(proposed[index], output, share)
                if chain.cursor is None:
                    del running[index]
                yield index, record, index not in running


PREFILL_ROWS = 4096  # prompt tokens per batched prefill forward (a longer prompt runs alone)


def prefill_groups(lengths: list[int], rows: int = PREFILL_ROWS) -> list[list[int]]:
    """The prompts' indices in order, cut into prefill forwards of at most `rows` tokens each."""
    groups: list[list[int]] = []
    size = 0
    for index, length in enumerate(lengths):
        if not groups or size + length > rows:
            groups.append([])
            size = 0
        groups[-1].append(index)
        size += length
    return groups


def replay_all(
    target: Target,
    draft: Eagle3Draft,
    wiring: Wiring | list[Wiring],
    prompts: list[list[int]],
    config: ReplayConfig,
) -> list[list[PrefillRecord | StepRecord]]:
    """Each prompt's records, the prompts replayed as one batch with the same settings."""
    records: list[list[PrefillRecord | StepRecord]] = [[] for _ in prompts]
    for index, record, _ in replay_batch(target, draft, wiring, prompts, [config] * len(prompts)):
        records[index].append(record)
    return records


def accept_lengths(
    target: Target,
    draft: Eagle3Draft,
    prompts: list[list[int]],
    wiring: Wiring | list[Wiring],
    num_steps: int,
    max_new_tokens: int,
    math: DraftMath | None = None,
) -> list[list[int]]:
    """Per prompt, the accepted count a of every verify step of an unrecorded replay (live accept
    lengths), the prompts replayed as one batch (`wiring`: one, or one per prompt)."""
    config = ReplayConfig(num_steps, max_new_tokens, record=False, math=math)
    return [
        [r.accepted_count for r in records if isinstance(r, StepRecord)]
        for records in replay_all(target, draft, wiring, prompts, config)
    ]


def propose_all(draft: Eagle3Draft, running: dict[int, Chain]) -> dict[int, DraftedStep]:
    """1-2 for every running sample: the catch-ups of samples with the same settings in one draft
    forward (`draft_catch_ups`: each its own committed count, packed), then the chains of samples
    drafting the same number of tokens with the same settings proposed together (`draft_chains`); a
    sample's draft time is its share of its groups' forwards."""
    from backend.engine.dflash_step import DFlashChain

    if any(isinstance(chain, DFlashChain) for chain in running.values()):  # a block each, its own forward
        return {index: chain.propose() for index, chain in running.items()}
    device = next(draft.parameters()).device
    spent = dict.fromkeys(running, 0.0)
    caught: dict[int, torch.Tensor] = {}
    for config, members in _groups(running, lambda chain: chain.num_drafts > 0, lambda chain: chain.config):
        started = time.perf_counter()
        chains = [running[index] for index in members]
        hidden = draft_catch_ups(
            draft, [c.caches.draft for c in chains], [c.cursor for c in chains], config.math
        )
        share = elapsed_ms(started, device) / len(members)
        for row, index in enumerate(members):
            caught[index], spent[index] = hidden[row : row + 1], spent[index] + share
    proposals = {index: Proposal() for index in running}
    by_chain = _groups(running, lambda chain: chain.num_drafts > 0, lambda c: (c.num_drafts, c.config))
    for (steps, config), members in by_chain:
        started = time.perf_counter()
        chains = [running[index] for index in members]
        made = draft_chains(
            draft,
            [chain.caches.draft for chain in chains],
            torch.cat([caught[index] for index in members]),
            [chain.cursor.position - 1 for chain in chains],
            config,
            [chain.history for chain in chains],
            steps,
        )
        share = elapsed_ms(started, device) / len(members)
        for index, proposal in zip(members, made, strict=True):
            proposals[index], spent[index] = proposal, spent[index] + share
    return {index: chain.proposed(proposals[index], spent[index]) for index, chain in running.items()}


def _groups(running: dict[int, Chain], wanted, key) -> list[tuple[object, list[int]]]:
    """The running samples `wanted` keeps, grouped by `key` (equal keys share a forward), in order."""
    groups: list[tuple[object, list[int]]] = []
    for index, chain in running.items():
        if not wanted(chain):
            continue
        value = key(chain)
        group = next((g for g in groups if g[0] == value), None)
        if group is None:
            groups.append((value, [index]))
        else:
            group[1].append(index)
    return groups
