"""Background tasks for the dashboard: long work (a replay, a probe, a batch) runs in a thread while
the page polls its progress; the user can leave the page and come back.

One process-wide manager. Model work is serialised by one lock: the target is shared between
tasks, and a replay's forward hooks must not see another task's forwards. Models stay loaded
between tasks (keyed by path). Pages import this module only; it imports torch lazily.
"""

from __future__ import annotations

import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from backend import BadInput

Progress = Callable[[float, str], None]


@dataclass
class Task:
    id: str
    kind: str
    label: str
    status: str = "queued"  # queued | running | done | failed
    progress: float = 0.0
    message: str = ""
    result: Any = None
    error: str | None = None
    details: dict = field(default_factory=dict)  # e.g. the preflight report of a refused draft
    started: float = field(default_factory=time.time)
    finished: float | None = None

    @property
    def active(self) -> bool:
        return self.status in ("queued", "running")


class TaskManager:
    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        self._guard = threading.Lock()  # protects _tasks
        self.model_lock = threading.Lock()  # one model job at a time

    def submit(self, kind: str, label: str, work: Callable[[Progress], Any]) -> str:
        task = Task(uuid.uuid4().hex[:10], kind, label)
        with self._guard:
            self._tasks[task.id] = task

        def progress(fraction: float, message: str) -> None:
            task.progress, task.message = max(0.0, min(1.0, fraction)), message

        def run() -> None:
            with self.model_lock:
                task.status = "running"
                # status is set last: a poller that sees it finished also sees the result or error
                try:
                    task.result = work(progress)
                    task.progress, task.finished, task.status = 1.0, time.time(), "done"
                except PreflightRefused as refused:
                    task.error, task.details = str(refused), {"preflight": refused.report}
                    task.finished, task.status = time.time(), "failed"
                except BadInput as error:
                    task.error, task.finished, task.status = str(error), time.time(), "failed"
                except Exception as error:  # noqa: BLE001 - shown on the page, never crashes it
                    task.error = f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=4)}"
                    task.finished, task.status = time.time(), "failed"

        threading.Thread(target=run, name=f"speclens-{kind}-{task.id}", daemon=True).start()
        return task.id

    def get(self, task_id: str | None) -> Task | None:
        with self._guard:
            task = self._tasks.get(task_id) if task_id else None
            return replace(task) if task else None

    def list(self, kind: str | None = None) -> list[Task]:
        with self._guard:
            tasks = [replace(t) for t in self._tasks.values() if kind is None or t.kind == kind]
        return sorted(tasks, key=lambda t: t.started, reverse=True)

    def wait(self, task_id: str, timeout: float = 600.0) -> Task:
        deadline = time.time() + timeout
        while time.time() < deadline:
            task = self.get(task_id)
            if task is None or not task.active:
                return task
            time.sleep(0.05)
        raise TimeoutError(f"task {task_id} still running after {timeout} s")


MANAGER = TaskManager()


class PreflightRefused(BadInput):
    def __init__(self, message: str, report: dict):
        super().__init__(message)
        self.report = report


# ----------------------------------------------------------------------------- models

_targets: dict[str, Any] = {}
_drafts: dict[tuple, Any] = {}


def load_pair(target_path: str, draft_path: str, aux_hf_indices: list[int] | None = None, sample_length: int | None = None):
    """(target, draft, wiring), cached by path; call with the model lock held. A draft whose
    preflight fails raises PreflightRefused carrying the report."""
    from backend.checkpoints import load_draft, load_target, preflight

    if target_path not in _targets:
        _targets[target_path] = load_target(target_path, device=None, dtype=None)
    target = _targets[target_path]
    key = (target_path, draft_path, tuple(aux_hf_indices or ()), sample_length)
    if key not in _drafts:
        report = preflight(draft_path, target_path, sample_length, aux_hf_indices)
        if not report.ok:
            failure = report.failures()[0]
            raise PreflightRefused(f"preflight failed: {failure.name}: {failure.message}", report.to_dict())
        _drafts[key] = load_draft(draft_path, target, sample_length, aux_hf_indices)
    draft = _drafts[key]
    return target, draft, draft.wiring


# ----------------------------------------------------------------------------- task bodies


def _factory(db_url: str | None):
    from db import store

    return store.session_factory(store.make_engine(db_url))


def replay_work(db_url: str | None, target_path: str, draft_path: str, prompt_ids: list[int] | str, num_steps: int,
                max_new_tokens: int, aux_hf_indices: list[int] | None = None, sample_ref: str | None = None,
                sample_id: int | None = None) -> Callable[[Progress], dict]:
    def work(progress: Progress) -> dict:
        from backend.jobs import run_replay_job
        from backend.replay import ReplayConfig
        from db import store

        progress(0.0, "loading models")
        target, draft, wiring = load_pair(target_path, draft_path, aux_hf_indices)
        ids = prompt_ids
        if isinstance(ids, str):  # a typed prompt: tokenized like the CLI's --prompt
            if target.tokenizer is None:
                raise BadInput(f"target {target_path} has no tokenizer; pick a sample instead")
            ids = target.tokenizer(ids)["input_ids"]
            if not ids:
                raise BadInput("the prompt tokenizes to nothing")
        outcome = run_replay_job(_factory(db_url), store.artifact_root(db_url), target, draft, draft_path, ids,
                                 wiring, ReplayConfig(num_steps, max_new_tokens), sample_ref=sample_ref,
                                 sample_id=sample_id,
                                 progress=lambda done, total: progress(done / total, f"{done}/{total} tokens"))
        return {"run_id": outcome.run_id, "mean_accept_length": outcome.metrics.get("mean_accept_length")}
    return work


def start_replay(db_url: str | None, target_path: str, draft_path: str, prompt_ids: list[int] | str, num_steps: int,
                 max_new_tokens: int, aux_hf_indices: list[int] | None = None, sample_ref: str | None = None,
                 sample_id: int | None = None, label: str | None = None) -> str:
    work = replay_work(db_url, target_path, draft_path, prompt_ids, num_steps, max_new_tokens, aux_hf_indices,
                       sample_ref, sample_id)
    return MANAGER.submit("replay", label or f"replay {draft_path} K={num_steps}", work)


def start_probe(target_path: str, draft_path: str, samples: list, num_steps: int, budget: int, live: int) -> str:
    def work(progress: Progress) -> dict:
        from backend.probe import run_probe

        progress(0.0, "loading models")
        target, draft, wiring = load_pair(target_path, draft_path)
        report = run_probe(target, draft, wiring, samples, num_steps, budget, live,
                           progress=lambda message, fraction: progress(fraction, message))
        return report.to_dict()
    return MANAGER.submit("probe", f"probe {draft_path}", work)


def start_reference(db_url: str | None, run_id: int, reference: dict) -> str:
    """Compare a run's fed features with a reference and store the rows (see backend.run_diffs)."""
    def work(progress: Progress) -> dict:
        from backend.run_diffs import compute_reference

        return compute_reference(_factory(db_url), run_id, reference, load_pair, progress)
    return MANAGER.submit("reference", f"run {run_id} vs {reference.get('kind')}", work)


def start_batch(kind: str, label: str, body: Callable[[Progress], Any]) -> str:
    """Any other model job (batch compare, teacher vs live, train-vs-serve diff)."""
    return MANAGER.submit(kind, label, body)
