"""The dashboard's model work runs in a worker process, not in the Streamlit server: a job that
crashes the interpreter or runs out of memory ends that job (its task fails, its run is reaped as
interrupted) and the server keeps serving.

One long-lived worker, started with `spawn` (never `fork`: the server is multithreaded), keeps the
loaded models between jobs (`backend.service.models` lives in it). A job is a top-level function
and plain arguments, so it pickles by reference; it reports progress through a queue. A worker
that dies is replaced at the next job. SPECLENS_JOBS_IN_PROCESS=1 runs jobs in the calling thread
instead (debugging).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import sys
import threading
import traceback
import types
from collections.abc import Callable
from typing import Any

from backend import BadInput
from backend.run.records import Progress

POLL_S = 0.5


class WorkerDied(RuntimeError):
    pass


class JobFailed(Exception):
    """A job that raised in the worker: its message and, for a refused draft, the preflight report."""

    def __init__(self, message: str, details: dict, bad_input: bool):
        super().__init__(message)
        self.details, self.bad_input = details, bad_input


def _serve(requests, responses) -> None:
    """The worker's loop: run each job, stream its progress, send its result or its error. It first
    imports the model stack (torch, transformers, the engine), which every job needs: a worker
    started ahead of its first job (`Worker.prestart`) has done that by the time the job comes."""
    try:
        import backend.service.jobs  # noqa: F401 - torch, transformers, the engine and the job runner

        broken = None
    except Exception as error:  # noqa: BLE001 - each job is told why, and the worker lives on
        broken = f"the worker cannot import the model stack: {type(error).__name__}: {error}"
    while True:
        job, args, kwargs = requests.get()
        if broken:
            responses.put(("failed", broken, {}, False))
            continue

        def progress(fraction: float, message: str) -> None:
            responses.put(("progress", float(fraction), str(message)))

        try:
            responses.put(("done", job(*args, progress=progress, **kwargs)))
        except BadInput as error:
            report = getattr(error, "report", None)
            details = {"preflight": report.result().to_dict()} if report is not None else {}
            responses.put(("failed", str(error), details, True))
        except BaseException as error:  # noqa: BLE001 - reported to the page; the worker lives on
            from backend.service.database import refusal

            said = refusal(error)  # the database or the disk refused: one line, as the CLI says it
            if said is not None:
                responses.put(("failed", said, {}, True))
                continue
            message = f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=4)}"
            responses.put(("failed", message, {}, False))


class Worker:
    def __init__(self, name: str = "speclens-worker") -> None:
        self.name = name
        self._context = multiprocessing.get_context("spawn")
        self._process = None
        self._lock = threading.Lock()  # one job at a time (the models are shared inside)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None and self._process.is_alive() else None

    def _start(self) -> None:
        self._requests, self._responses = self._context.Queue(), self._context.Queue()
        self._process = self._context.Process(
            target=_serve, args=(self._requests, self._responses), name=self.name, daemon=True
        )
        # `spawn` re-imports the parent's __main__ in the child. Under Streamlit (and its AppTest)
        # __main__ can be a page script, which must not run there: the worker needs only importable
        # modules, so it starts with an empty __main__.
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            self._process.start()
        finally:
            if main is not None:
                sys.modules["__main__"] = main

    def prestart(self) -> None:
        """Start the worker now if none is running (returns at once): every page does it first, so
        that the first job does not wait for a process to import torch. A job holds the lock while it
        runs, and then the worker is alive: never wait for the job to finish."""
        if os.environ.get("SPECLENS_JOBS_IN_PROCESS") == "1" or not self._lock.acquire(blocking=False):
            return
        try:
            self._ensure_started()
        finally:
            self._lock.release()

    def _ensure_started(self) -> None:
        """A live worker, started now if there is none (the caller holds the lock)."""
        if self._process is None or not self._process.is_alive():
            self._start()

    def run(self, job: Callable, args: tuple, kwargs: dict, progress: Progress) -> Any:
        """Run job(*args, progress=..., **kwargs) in the worker; its result, or JobFailed / WorkerDied."""
        if os.environ.get("SPECLENS_JOBS_IN_PROCESS") == "1":
            return job(*args, progress=progress, **kwargs)
        with self._lock:
            self._ensure_started()
            self._requests.put((job, args, kwargs))
            while True:
                try:
                    message = self._responses.get(timeout=POLL_S)
                except queue.Empty:
                    if not self._process.is_alive():
                        code = self._process.exitcode
                        self._process = None
                        hint = " (killed: out of memory?)" if code is not None and code < 0 else ""
                        raise WorkerDied(
                            f"the worker process running this job died with exit code {code}{hint}; "
                            "the dashboard is fine, and a new worker starts with the next job"
                        ) from None
                    continue
                if message[0] == "progress":
                    progress(message[1], message[2])
                elif message[0] == "done":
                    return message[1]
                else:
                    raise JobFailed(message[1], message[2], message[3])

    def stop(self) -> None:
        with self._lock:
            if self._process is not None and self._process.is_alive():
                self._process.kill()
                self._process.join(5)
            self._process = None


WORKER = Worker()
