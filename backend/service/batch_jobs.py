"""Batched replays: requests that differ only in their prompt (a dataset's samples for one draft)
replayed as one batch (backend/engine/batch.py), each stored as the run `run_plan` would store.

Every request is resolved as `run_replay` resolves it; each gets its own run, writer and hidden-state
artifact, opened before the batch starts and closed (finished) as soon as its sample's last record is
written, so a batch stopped part way keeps every sample that finished. A failure or SIGTERM fails
(interrupts) only the runs still open, with every record that arrived whole. A run made in a batch
says so in its metrics (`batch_size`): its verify times are the batch forward's, shared evenly.
"""

from __future__ import annotations

import os

from backend import BadInput, Terminated
from backend.engine.batch import batchable, replay_batch
from backend.engine.loading import Target
from backend.run.records import Progress, StepRecord, no_progress
from backend.run.request import ReplayRequest
from backend.service import traces
from backend.service.checkpoints import checked_override
from backend.service.database import Database, open_database
from backend.service.jobs import (
    RECORDING,
    STOP,
    ReplayOutcome,
    close_run,
    fail_run,
    freeze_long_lived_objects,
    open_run,
    run_plan,
    take,
)
from backend.service.plan import ReplayPlan, resolve
from backend.service.run_tensors import RunTensors
from backend.service.run_writer import RunWriter, flush_together
from db import store

MAX_BATCH = 16  # samples per batch when none is asked for (the CPU gains little past it)
MEMORY_SHARE = 0.5  # of the memory free now that a batch's caches may take


def together(plans: list[ReplayPlan]) -> bool:
    """Whether these plans can share a batch: the greedy chain, fed one wiring."""
    wiring = plans[0].wiring
    return all(batchable(p.config) and p.wiring == wiring for p in plans)


def run_plans(
    database: Database, target: Target, draft, plans: list[ReplayPlan], progress: Progress = no_progress
) -> list[ReplayOutcome]:
    """Replay `plans` as one batch (one after another where they cannot share one: `together`) and
    store each as a run."""
    if len(plans) == 1 or not together(plans):
        return [run_plan(database, target, draft, plan, progress) for plan in plans]
    outcomes = [open_run(database, target, plan) for plan in plans]
    for outcome in outcomes:
        outcome.batch_size = len(plans)
    freeze_long_lived_objects()
    tensors = [
        RunTensors(database.artifact_dir, o.run_id, p.wiring.aux_hf_indices)
        for o, p in zip(outcomes, plans, strict=True)
    ]
    writers = [  # committed together, on one clock (flush_together)
        RunWriter(database, o.run_id, t, own_clock=False) for o, t in zip(outcomes, tensors, strict=True)
    ]
    still_open = set(range(len(plans)))
    total = sum(p.config.max_new_tokens for p in plans)
    made = 0  # tokens out so far, over the batch
    RECORDING.set()
    try:
        prompts, configs = [list(p.prompt_ids) for p in plans], [p.config for p in plans]
        for index, record, last in replay_batch(target, draft, plans[0].wiring, prompts, configs):
            take(outcomes[index], record, tensors[index], writers[index])
            if last:
                close_run(
                    database,
                    target,
                    plans[index],
                    outcomes[index],
                    writers[index],
                    tensors[index],
                    no_progress,
                )
                still_open.discard(index)
            elif writers[index].due():  # every open run's batch, one transaction
                flush_together(database, [writers[i] for i in sorted(still_open)])
            made += len(record.committed_ids) if isinstance(record, StepRecord) else 1
            progress(
                made / total,
                f"{made}/{total} tokens, {len(plans) - len(still_open)}/{len(plans)} samples done",
            )
            if STOP.is_set():
                STOP.clear()
                raise Terminated()
    except BaseException as error:
        RECORDING.clear()
        for index in sorted(still_open):
            _fail(database, plans[index], outcomes[index], writers[index], tensors[index], error)
        if isinstance(error, store.RunGone):
            raise BadInput(str(error)) from None
        raise
    RECORDING.clear()
    if target.tokenizer is not None:
        for outcome in outcomes:
            outcome.output_text = target.tokenizer.decode(outcome.output_ids)
    return outcomes


def _fail(database: Database, plan: ReplayPlan, outcome, writer, tensors, error: BaseException) -> None:
    """A run still open when the batch failed: failed (interrupted) with every record that arrived."""
    try:
        fail_run(database, plan, outcome, writer, tensors, error)
    except BadInput:  # this run was deleted too
        pass


def batch_size(target: Target, plan_tokens: int, asked: int | None = None) -> int:
    """Samples per batch: `asked` when given, else as many as MEMORY_SHARE of the free memory holds
    (each sample's target KV cache at `plan_tokens` tokens, twice over for what else it keeps), at
    most MAX_BATCH and at least 1."""
    if asked:
        return asked
    config = target.model.config
    layers = config.num_hidden_layers
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_sample = 2 * 2 * layers * kv_heads * head_dim * plan_tokens * target.dtype.itemsize
    return max(1, min(MAX_BATCH, int(MEMORY_SHARE * free_memory(target) // max(1, per_sample))))


def free_memory(target: Target) -> int:
    """Bytes free where the target's caches live: the GPU's, or the machine's available memory."""
    import torch

    if target.device.type == "cuda":
        return torch.cuda.mem_get_info(target.device)[0]
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):  # no such counter here: assume room for one sample
        return 0


def run_in_batches(
    requests: list[ReplayRequest],
    db_url: str | None = None,
    batch: int | None = None,
    progress: Progress = no_progress,
) -> list[ReplayOutcome]:
    """Replay `requests` (one target and draft, the same settings, one prompt each) in batches of
    `batch` samples (default: `batch_size`'s choice) and store each as a run: the outcomes in the
    requests' order. The pair loads once."""
    first = requests[0]
    override = checked_override(first.target, first.aux_hf_indices)
    target, draft, report = traces.load_pair(first, progress)
    plans = [resolve(request, target, draft, report, override) for request in requests]
    traces.fill(target, plans, open_database(db_url), progress)
    longest = max(len(p.prompt_ids) + p.config.max_new_tokens + p.config.num_steps + 1 for p in plans)
    size = batch_size(target, longest, batch)
    database = open_database(db_url)
    outcomes: list[ReplayOutcome] = []
    for begin in range(0, len(plans), size):
        chunk = plans[begin : begin + size]

        def inner(fraction: float, message: str, begin=begin, chunk=chunk) -> None:
            progress((begin + fraction * len(chunk)) / len(plans), f"batch of {len(chunk)}: {message}")

        outcomes += run_plans(database, target, draft, chunk, inner)
    return outcomes
