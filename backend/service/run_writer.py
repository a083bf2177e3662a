"""A run's records written as they arrive, in batches: one transaction every half second or 128 steps
stamps the run's heartbeat and partial output and inserts the batch, so a crash keeps everything up
to the last commit while a fast replay does not pay a commit per step; a batch of samples' runs
commits together."""

from __future__ import annotations

import time

from backend.run.records import PrefillRecord, StepRecord
from backend.service.database import Database
from backend.service.run_tensors import RunTensors
from db import store


class RunWriter:
    """Writes a run's steps and token statistics as they arrive, in batches: one transaction every
    COMMIT_EVERY_S seconds (or COMMIT_EVERY_STEPS steps) that stamps the run's heartbeat and partial
    output and bulk-inserts the batch (`store.write_run_batch`: plain statements, no ORM objects),
    so a crash keeps everything up to the last commit while a fast replay does not pay a commit
    per step. The heartbeat is stamped by every commit, and commits follow the steps: while the
    replay advances, it is never older than COMMIT_EVERY_S plus one step."""

    COMMIT_EVERY_S = 0.5
    COMMIT_EVERY_STEPS = 128

    def __init__(
        self, database: Database, run_id: int, tensors: RunTensors | None = None, own_clock: bool = True
    ):
        """`own_clock` False: `add` never commits; the caller commits this writer with others
        (`flush_together`, a batch of samples' runs)."""
        self.database, self.run_id, self.tensors = database, run_id, tensors
        self.own_clock = own_clock
        self.steps: list[StepRecord] = []
        self.output_ids: list[int] = []  # everything emitted so far, stored with each batch
        self.committed = 0  # steps committed so far (the run's first `committed` steps)
        self.last_commit = time.perf_counter()

    def add(self, record: PrefillRecord | StepRecord) -> None:
        if isinstance(record, StepRecord):
            self.steps.append(record)
            self.output_ids += record.committed_ids
        else:
            self.output_ids.append(record.first_token)
        if self.own_clock and self.due():
            self.flush()

    def due(self) -> bool:
        return (
            time.perf_counter() - self.last_commit >= self.COMMIT_EVERY_S
            or len(self.steps) >= self.COMMIT_EVERY_STEPS
        )

    def flush(self) -> None:
        """One transaction: the batch, the run's partial output and its heartbeat. RunGone when
        the run was deleted meanwhile (nothing is written then)."""
        flush_together(self.database, [self])

    def write(self, session) -> None:
        """This writer's batch into the caller's transaction (RunGone when the run is gone)."""
        stats = self.tensors.pending_stats() if self.tensors is not None else []
        if not store.write_run_batch(session, self.run_id, self.steps, stats, self.output_ids):
            raise store.RunGone(self.run_id)

    def written(self) -> None:
        """After the commit of `write`'s transaction."""
        self.committed += len(self.steps)
        self.steps = []  # committed: never written twice, whatever follows
        self.last_commit = time.perf_counter()
        if self.tensors is not None:  # the committed steps' tensors reach the disk too
            self.tensors.flush()

    def close(self) -> None:
        self.flush()


def flush_together(database: Database, writers: list[RunWriter]) -> None:
    """Every writer's batch, partial output and heartbeat in one transaction (a batch of samples'
    runs commits once, not once per run), then each one's tensors to its part file."""
    with store.session_scope(database.factory) as session:
        for writer in writers:
            writer.write(session)
    for writer in writers:
        writer.written()
