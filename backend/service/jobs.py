"""The job runner: drives the engine and persists what it yields, step by step.

The CLI and the dashboard both run replays through `run_replay`: the request is resolved once into a
`ReplayPlan` (backend/service/plan.py), and `run_plan` opens the run, records it and closes it. A run is written as it goes, in
batches (service/run_writer.py: a commit every half second or 128 steps, with the run's heartbeat), so a crash
leaves a run marked failed (or, after SIGKILL, interrupted when reaped) with every step committed.
"""

from __future__ import annotations

import gc
import threading
import traceback
from dataclasses import dataclass, field, replace

import torch
from sqlalchemy.exc import SQLAlchemyError

from backend import BadInput, Terminated, first_line
from backend.diagnostics.precision import self_disagreement
from backend.engine.draft_model import Eagle3Draft
from backend.engine.loading import Target
from backend.engine.replay import replay
from backend.run.metrics import RunMetrics, run_metrics
from backend.run.records import PrefillRecord, Progress, StepRecord, no_progress
from backend.run.request import ReplayRequest
from backend.run.run_value import Resolved, params
from backend.run.wiring import Wiring
from backend.service import traces
from backend.service.checkpoints import checked_override
from backend.service.database import Database, open_database
from backend.service.plan import ReplayPlan, resolve
from backend.service.run_tensors import RunTensors, recover_artifact
from backend.service.run_writer import RunWriter
from db import store

# SIGTERM during a recording is honoured between records, never inside a database write: the CLI's
# handler sets STOP while RECORDING is set, and the replay loop raises Terminated at the next record.
STOP = threading.Event()
RECORDING = threading.Event()


@dataclass
class ReplayOutcome:
    run_id: int
    output_ids: list[int]
    steps: list[StepRecord]
    metrics: RunMetrics
    wiring: Wiring
    warnings: list[str]  # preflight and context warnings, for the CLI's stderr and the page
    engine: str = "auto"  # the reading the run used
    prefill_ms: float = 0.0
    resolved: Resolved = field(default_factory=Resolved)  # what the pair made of the request (stored)
    output_text: str | None = None  # the output in the target's tokenizer (None without one)
    artifact_path: str | None = None
    batch_size: int = 1  # samples replayed with it in one batch (backend/service/batch_jobs.py)


def run_replay(
    request: ReplayRequest, db_url: str | None = None, progress: Progress = no_progress
) -> ReplayOutcome:
    """Check the wiring override, load (or reuse) the pair, resolve the request once, replay and store
    the run."""
    override = checked_override(request.target, request.aux_hf_indices)
    target, draft, report = traces.load_pair(request, progress)
    plan = resolve(request, target, draft, report, override)
    database = open_database(db_url)
    traces.fill(target, [plan], database, progress)
    return run_plan(database, target, draft, plan, progress)


def run_plan(
    database: Database, target: Target, draft: Eagle3Draft, plan: ReplayPlan, progress: Progress = no_progress
) -> ReplayOutcome:
    """Replay `plan` and store it as one run: open the run, record each record as it arrives, close
    it as finished, or as failed / interrupted with every record that arrived whole."""
    outcome = open_run(database, target, plan)
    freeze_long_lived_objects()
    tensors = RunTensors(database.artifact_dir, outcome.run_id, plan.wiring.aux_hf_indices)
    writer = RunWriter(database, outcome.run_id, tensors)
    RECORDING.set()
    try:
        record_run(target, draft, plan, outcome, writer, tensors, progress)
    except store.RunGone as gone:
        RECORDING.clear()
        raise BadInput(str(gone)) from None
    except BaseException as error:
        RECORDING.clear()
        fail_run(database, plan, outcome, writer, tensors, error)
        raise
    RECORDING.clear()
    close_run(database, target, plan, outcome, writer, tensors, progress)
    if target.tokenizer is not None:
        outcome.output_text = target.tokenizer.decode(outcome.output_ids)
    return outcome


def open_run(database: Database, target: Target, plan: ReplayPlan) -> ReplayOutcome:
    """The run's row, with its params, before the first record."""
    request, resolved = plan.request, plan.resolved(target)
    with store.session_scope(database.factory) as session:
        run_id = store.create_run(
            session,
            kind="replay",
            target_path=target.path,
            draft_path=request.draft,
            params=params(request, resolved),
            aux_hf_indices=list(plan.wiring.aux_hf_indices),
            given=store.RunInput(list(plan.prompt_ids), request.sample_ref, request.sample_id),
        )
    return ReplayOutcome(
        run_id, [], [], RunMetrics(), plan.wiring, list(plan.warnings), plan.view.engine, resolved=resolved
    )


def record_run(target, draft, plan: ReplayPlan, outcome: ReplayOutcome, writer, tensors, progress) -> None:
    """Each record the engine yields, written as it arrives (SIGTERM honoured between records)."""
    total = plan.config.max_new_tokens
    for record in replay(target, draft, list(plan.prompt_ids), plan.wiring, plan.config):
        take(outcome, record, tensors, writer)
        progress(len(outcome.output_ids) / total, f"{len(outcome.output_ids)}/{total} tokens")
        if STOP.is_set():
            STOP.clear()
            raise Terminated()


def take(outcome: ReplayOutcome, record: PrefillRecord | StepRecord, tensors, writer) -> None:
    """One record into the run: the outcome's output and steps, the hidden states, the writer."""
    if isinstance(record, PrefillRecord):
        outcome.output_ids.append(record.first_token)
        outcome.prefill_ms = record.prefill_ms
    else:
        outcome.steps.append(record)
        outcome.output_ids.extend(record.committed_ids)
    tensors.add(record)
    writer.add(record)


def fail_run(database: Database, plan: ReplayPlan, outcome: ReplayOutcome, writer, tensors, error) -> None:
    """Every record that arrived whole is written, then the run is marked failed (or interrupted).
    A disk that refuses the rest (full, a file-size limit) loses only what it refused: the steps
    committed so far stay, with the hidden states of their part files, and the run is still marked;
    when even the full update cannot be written, in place (`store.mark_run_in_place`); when that
    fails too, the error says so, for the CLI's one line."""
    status = "interrupted" if isinstance(error, KeyboardInterrupt) else "failed"
    refused: list[str] = []  # what the disk did not take, said in the run's error
    try:
        writer.close()
    except store.RunGone as gone:
        raise BadInput(str(gone)) from None
    except (SQLAlchemyError, OSError) as failure:
        what = f"{len(writer.steps)} steps of its last batch" if writer.steps else "its last part file"
        refused.append(f"{what} ({_reason(failure)})")
    committed = outcome.steps[: writer.committed]
    artifact = {"artifact_path": None, "artifact_sha256": None}
    try:  # the hidden states of exactly the committed steps
        if writer.steps:
            artifact = recover_artifact(database.artifact_dir, outcome.run_id)
        else:
            artifact = tensors.save(database.artifact_dir, outcome.run_id)
    except OSError as failure:
        refused.append(f"its artifact ({_reason(failure)})")
    said = f"{type(error).__name__}: {_reason(error)}"
    if refused:
        said += "; not written, the disk refused them: " + "; ".join(refused)
    try:
        with store.session_scope(database.factory) as session:
            store.fail_run(
                session,
                outcome.run_id,
                error=f"{said}\n{traceback.format_exc(limit=3)}",
                output_ids=None if writer.steps else outcome.output_ids,  # None: the stored partial output
                metrics=run_metrics(committed, plan.config.num_steps, outcome.batch_size).to_dict(),
                status=status,
                **artifact,
            )
        return
    except (SQLAlchemyError, OSError) as failure:
        said += f"; its metrics were not written either ({_reason(failure)})"
    try:
        store.mark_run_in_place(database.factory, outcome.run_id, status=status, error=said)
    except (SQLAlchemyError, OSError) as failure:
        error.add_note(
            f"and run {outcome.run_id} could not be marked {status} ({_reason(failure)}): "
            "it shows as running until the next open finds its writer gone and marks it interrupted"
        )


def _reason(error: BaseException) -> str:
    """An error's one-line reason (a database error's driver message, without SQLAlchemy's SQL)."""
    return first_line(getattr(error, "orig", None) or error)


def close_run(
    database: Database, target: Target, plan: ReplayPlan, outcome, writer, tensors, progress
) -> None:
    """The last records, the artifact, the metrics (and the target's own disagreement off fp32)."""
    try:
        writer.close()
    except store.RunGone as gone:
        raise BadInput(str(gone)) from None
    artifact = tensors.save(database.artifact_dir, outcome.run_id)
    outcome.metrics = run_metrics(outcome.steps, plan.config.num_steps, outcome.batch_size)
    if target.dtype != torch.float32:  # the yardstick for judging this run against plain decoding
        progress(1.0, "measuring the target's own verify-vs-decode disagreement")
        agreement = self_disagreement(
            target, list(plan.prompt_ids), outcome.output_ids, plan.config.num_steps
        )
        outcome.metrics = replace(outcome.metrics, self_disagreement_per_1000=agreement.per_1000)
    outcome.artifact_path = artifact["artifact_path"]
    try:
        with store.session_scope(database.factory) as session:
            store.finish_run(
                session,
                outcome.run_id,
                output_ids=outcome.output_ids,
                metrics=outcome.metrics.to_dict(),
                **artifact,
            )
    except store.RunGone as gone:
        raise BadInput(str(gone)) from None


_FROZEN = threading.Event()


def freeze_long_lived_objects() -> None:
    """Once per process, before its first replay: move every object alive now (the loaded models,
    transformers' and torch's module-level objects: millions) out of the cyclic garbage collector's
    reach (`gc.freeze`). Otherwise a full collection, which scans them all, lands in the middle of a
    replay every few hundred steps and stalls it for ~0.2 s on the demo pair. Later objects are
    collected as usual; what is frozen lives as long as the process (it was alive anyway)."""
    if not _FROZEN.is_set():
        _FROZEN.set()
        gc.freeze()
