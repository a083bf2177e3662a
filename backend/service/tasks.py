"""Background tasks for the dashboard: long work (a replay, a probe, a batch) is tracked by a thread
while the page polls its progress; the user can leave the page and come back.

One process-wide manager. Model work runs in the worker process (backend/service/worker.py), one
job at a time: the target is shared between tasks, and a replay's forward hooks must not see
another task's forwards. Models stay loaded between tasks in the worker (`backend.service.models`).
A job that kills its worker fails alone; the dashboard stays up. Every job a page can start is a `start_*` function here:
pages pass plain values and requests, never code. This module imports torch lazily.
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
from backend.drafts.engine_table import PreflightResult
from backend.drafts.readings import reading_of
from backend.plain import KEY, Plain
from backend.run.records import Progress
from backend.run.request import ReplayRequest
from backend.service import models
from backend.service.reference_spec import ReferenceSpec
from backend.service.worker import WORKER, JobFailed


class WorkerBadInput(BadInput):
    """A BadInput raised in the worker, with the details (a refused draft's report) it carried."""

    def __init__(self, message: str, details: dict):
        super().__init__(message)
        self.details = details


@dataclass(frozen=True)
class FailureDetails(Plain):
    """What a failed task carries for the page beside its error: a refused draft's preflight report
    (the worker sends it as JSON, `{"preflight": ...}`)."""

    preflight: PreflightResult | None = None


def _failure_details(error: BadInput) -> FailureDetails:
    """A refused draft's report, from the error (this process) or its JSON (the worker's); nothing
    when it cannot be read: the task must end failed whatever its details hold."""
    report = getattr(error, "report", None)
    if report is not None:
        return FailureDetails(report.result())
    try:
        return FailureDetails.from_dict(getattr(error, "details", None) or {})
    except (TypeError, ValueError, AttributeError):
        return FailureDetails()


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
    details: FailureDetails = field(default_factory=FailureDetails)
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
                except BadInput as error:  # PreflightRefused carries the whole report for the page
                    task.details = _failure_details(error)
                    task.error, task.finished, task.status = str(error), time.time(), "failed"
                except JobFailed as failed:  # the worker already formatted it (type, message, trace)
                    task.error, task.finished, task.status = str(failed), time.time(), "failed"
                except Exception as error:  # noqa: BLE001 - shown on the page, never crashes it
                    task.error = f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=4)}"
                    task.finished, task.status = time.time(), "failed"

        threading.Thread(target=run, name=f"speclens-{kind}-{task.id}", daemon=True).start()
        return task.id

    def submit_job(self, kind: str, label: str, job: Callable, *args) -> str:
        """A model job run in the worker process (backend/service/worker.py): job(*args, progress=...)."""

        def work(progress: Progress) -> Any:
            try:
                return WORKER.run(job, args, {}, progress)
            except JobFailed as failed:
                if failed.bad_input:
                    raise WorkerBadInput(str(failed), failed.details) from None
                raise

        return self.submit(kind, label, work)

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


def job(kind: str, label: Callable[..., str]):
    """Make `fn` a job pages can start: `fn.start(*args)` submits `fn(*args)` to the worker as a task
    of `kind`, labelled `label(*args)`. The job's parameters are written once, on the job itself;
    `fn` stays a plain top-level function (the worker process imports it by name)."""

    def register(fn: Callable) -> Callable:
        def start(*args) -> str:
            return MANAGER.submit_job(kind, label(*args), fn, *args)

        start.__doc__ = fn.__doc__
        fn.start = start
        return fn

    return register


# ----------------------------------------------------------------------------- the jobs pages start
# Each job is a top-level function of plain arguments (it runs in the worker process, see
# backend/service/worker.py); each start_* validates what it can here and submits the job.


@dataclass(frozen=True)
class ReplayResult(Plain):
    """A replay job's result: the stored run, its accept length and warnings; when a reference was asked,
    the label of the hidden-state comparison stored with the run, or why there is none."""

    run_id: int
    mean_accept_length: float | None
    warnings: list[str] = field(default_factory=list)
    reference: str | None = None
    reference_note: str | None = None


def replay_job(
    db_url: str | None, request: ReplayRequest, reference: ReferenceSpec | None = None, *, progress: Progress
) -> ReplayResult:
    """The replay, stored; then, when `reference` is given, that hidden-state reference of the new run
    (so the step viewer opens on a comparison, not on norms). A reference this run cannot have (a draft
    wider than the target, nothing recorded), or one that failed, is said in `reference_note`: the run
    stands either way."""
    from backend.service.jobs import run_replay
    from backend.service.references import compute_reference

    outcome = run_replay(request, db_url, progress)
    label = note = None
    if reference is not None and outcome.steps:
        try:
            label = compute_reference(db_url, outcome.run_id, reference, progress).reference
        except BadInput as error:
            note = str(error)
        except Exception as error:  # noqa: BLE001 - the run is stored; the page shows why it has no reference
            note = f"{type(error).__name__}: {error}"
    accept_length = outcome.metrics.mean_accept_length
    return ReplayResult(outcome.run_id, accept_length, list(outcome.warnings), label, note)


def start_replay(
    db_url: str | None,
    request: ReplayRequest,
    label: str | None = None,
    reference: ReferenceSpec | None = None,
) -> str:
    return MANAGER.submit_job("replay", label or request.label, replay_job, db_url, request, reference)


@dataclass(frozen=True)
class Comparison:
    """Two drafts replayed on the same samples: side A's and side B's request, each a template whose
    prompt is every sample's in turn (so a chain and a tree of one draft compare too). With `reuse`, a
    finished run of the same target, draft, prompt and settings (`runs.find_finished_run`) stands in for
    a replay. `ray`: a Ray address (or 'local') to fan the replays out to, as `evaluate --ray` does."""

    request_a: ReplayRequest
    request_b: ReplayRequest
    samples: list
    dataset_id: int
    reuse: bool = True
    ray: str | None = None

    @property
    def sides(self) -> tuple[tuple[str, ReplayRequest], ...]:
        return (("A", self.request_a), ("B", self.request_b))


def comparison_pairs(c: Comparison) -> dict:
    """{(sample index, side): eval_pairs.Pair}: each side's request on every sample."""
    from backend.service.eval_pairs import pairs_of

    pairs, numbers = {}, {sample.index: number for number, sample in enumerate(c.samples)}
    for side, template in c.sides:
        for pair in pairs_of(
            template,
            [template.draft],
            c.samples,
            lambda sample: f"dataset {c.dataset_id} #{sample.index}",
            lambda _draft, sample, side=side: (
                f"sample {numbers[sample.index] + 1}/{len(c.samples)}, draft {side}"
            ),
        ):
            pairs[(pair.sample_index, side)] = pair
    return pairs


@dataclass(frozen=True)
class CompareRow(Plain):
    """One sample of a comparison: its two runs and their accept lengths (None: a run without a verify
    step). The keys are the table's column names."""

    sample: int = field(metadata={KEY: "sample #"})
    source: str
    run_a: int = field(metadata={KEY: "run A"})
    al_a: float | None = field(metadata={KEY: "AL A"})
    run_b: int = field(metadata={KEY: "run B"})
    al_b: float | None = field(metadata={KEY: "AL B"})
    al_delta: float = field(metadata={KEY: "AL delta (B - A)"})


@dataclass(frozen=True)
class CompareResult(Plain):
    """A comparison's result: one row per sample, largest |delta| first; how many runs were found
    finished (`reused`) and replayed now; the Ray address used; each side's draft path."""

    rows: list[CompareRow]
    reused: int = 0
    replayed: int = 0
    ray: str | None = None
    drafts: dict[str, str] = field(default_factory=dict)  # side ("A", "B") -> draft path
    settings: dict[str, str] = field(default_factory=dict)  # side -> ReplayRequest.settings_label


def compare_job(db_url: str | None, comparison: Comparison, *, progress: Progress) -> CompareResult:
    """The pairs of both sides run as `evaluate` runs them (backend.service.evaluate.run_pairs):
    here one after another, or on Ray when `ray` names a cluster."""
    from backend.service.evaluate import Where, run_pairs
    from backend.service.runs import get_run

    c, pairs = comparison, comparison_pairs(comparison)
    run_ids, reused = run_pairs(db_url, list(pairs.values()), c.reuse, progress, Where(ray=c.ray))
    rows = []
    for sample in c.samples:
        run = {side: run_ids[pairs[(sample.index, side)]] for side, _ in c.sides}
        al = {side: get_run(db_url, r).measured.mean_accept_length for side, r in run.items()}
        delta = (al["B"] or 0) - (al["A"] or 0)
        rows.append(CompareRow(sample.index, sample.source, run["A"], al["A"], run["B"], al["B"], delta))
    return CompareResult(
        rows=sorted(rows, key=lambda r: -abs(r.al_delta)),
        reused=reused,
        replayed=len(pairs) - reused,
        ray=c.ray or None,
        drafts={side: request.draft for side, request in c.sides},
        settings={side: request.settings_label for side, request in c.sides},
    )


def start_compare(db_url: str | None, comparison: Comparison) -> str:
    """Replay both drafts on each sample (stored as runs): a CompareResult. A bad setting of either side
    was refused when its request was made."""
    a, b = (_name(request.draft) for _, request in comparison.sides)
    label = f"{a} vs {b} on {len(comparison.samples)} sample(s)"
    return MANAGER.submit_job("compare", label, compare_job, db_url, comparison)


@job("probe", lambda target_path, draft_path, *_: f"probe {_name(draft_path)}")
def probe_job(target_path, draft_path, samples, num_steps, budget, live, via="step", *, progress: Progress):
    """The wiring probe's report as the probe tab keeps it (probe_settings.ProbeResult; `via` trace: live
    replays over traces rank every candidate); a DFlash draft's layer probe (dflash_probe.py)."""
    from backend.diagnostics.probe import ProbeSettings, run_probe

    progress(0.0, "loading models")
    target, draft, _ = models.pair(target_path, draft_path)
    if getattr(draft.config, "method", None) == "dflash":  # its target layers, as `probe` on the CLI
        from backend.diagnostics.dflash_probe import probe_layers

        return probe_layers(target, draft, samples, progress=progress)
    view, wiring = reading_of("auto", None, draft, target.num_layers)  # as the CLI's probe: one rule
    settings = ProbeSettings(num_steps, budget, live, via=via)
    return run_probe(
        target,
        draft,
        wiring,
        samples,
        settings,
        progress,
        view.math,
        ran_by="the probe tab",
    )


@job("engine-check", lambda db_url, settings, *_: f"{settings.title} check {_name(settings.request.draft)}")
def engine_check_job(db_url: str | None, settings, samples, url: str | None, *, progress: Progress):
    """The replay against an engine served beside it (backend/service/engine_check.py): at `url`, or launched
    here (None); an EngineCheck."""
    from backend.service.engine_check import engine_check

    return engine_check(db_url, samples, settings, url=url, progress=progress)


@job("diagnose", lambda target_path, draft_path, *_: f"diagnose {_name(draft_path)}")
def diagnose_job(
    target_path, draft_path, samples, options: dict, db_url: str | None = None, *, progress: Progress
):
    """The verdict (findings.DiagnosisResult). `options`: sglang, vllm, context, engine, num_steps,
    live_samples (the CLI's flags); `db_url`: where a probe kept with the pair is found (the cheap
    checks use its answer)."""
    from backend.diagnostics.diagnose import DiagnoseOptions
    from backend.service.diagnosis import diagnose

    return diagnose(target_path, draft_path, samples, DiagnoseOptions(**options), progress, db_url)


@job("features", lambda target_path, draft_path, *_: f"served features {_name(draft_path)}")
def feature_check_job(target_path, draft_path, responses, source, *, progress: Progress):
    """serve-check --features on saved SGLang responses (backend.service.feature_check.FeatureCheck)."""
    from backend.service.feature_check import feature_check

    return feature_check(target_path, draft_path, responses, None, source, progress)


@job("reference", lambda db_url, run_id, reference: f"run {run_id} vs {reference.kind}")
def reference_job(db_url: str | None, run_id: int, reference, *, progress: Progress):
    """Compare a run's fed features with a reference (reference_spec.ReferenceSpec) and store the rows
    (backend.service.references): its ReferenceResult."""
    from backend.service.references import compute_reference

    return compute_reference(db_url, run_id, reference, progress)


@job("doctor", lambda target_path, draft_path, *_: f"checkpoint doctor {_name(draft_path)}")
def doctor_job(target_path, draft_path, samples, other_draft, *, progress: Progress):
    """The checkpoint doctor (backend.diagnostics.doctor.DoctorResult)."""
    from backend.diagnostics.doctor import doctor

    progress(0.1, "reading the checkpoint")
    return doctor(draft_path, target_path, samples, other_draft)


@job("diff", lambda target_path, draft_path, feature_path: f"train vs serve {feature_path}")
def train_vs_serve_job(target_path: str, draft_path: str, feature_path: str, *, progress: Progress):
    """The train-vs-serve diff of a feature file (backend.diagnostics.mismatch.TrainServeResult)."""
    from backend.data.features import load_feature_file
    from backend.diagnostics.hidden_diff import train_vs_serve

    progress(0.1, "loading models")
    target, draft, _ = models.pair(target_path, draft_path)
    _, wiring = reading_of(
        "auto", None, draft, target.num_layers
    )  # what the draft is fed (DFlash too): one rule
    features = load_feature_file(feature_path, target.hidden_size)
    progress(0.4, "recomputing serving features")
    return train_vs_serve(target, features, list(wiring.aux_hf_indices), models.is_dflash_draft(draft))


@job("agreement", lambda *_: "accuracy vs live")
def agreement_job(
    target_path,
    draft_path,
    samples,
    num_steps,
    max_new_tokens,
    training_aux_hf_indices,
    *,
    progress: Progress,
):
    """Teacher-forced accuracy beside live acceptance, per sample (agreement.Agreement)."""
    from backend.diagnostics.agreement import agreement_of, teacher_vs_live
    from backend.engine.replay import ReplayConfig
    from backend.run.wiring import Wiring, check_indices

    progress(0.0, "loading models")
    target, draft, _ = models.pair(target_path, draft_path)
    view, wiring = reading_of("auto", None, draft, target.num_layers)  # as the CLI's teacher: one rule
    claimed = None
    if training_aux_hf_indices:
        check_indices(training_aux_hf_indices, target.num_layers)
        claimed = Wiring(tuple(training_aux_hf_indices), "claimed training wiring")
    config = ReplayConfig(num_steps, max_new_tokens, math=view.math)
    rows = teacher_vs_live(target, draft, wiring, samples, config, progress, claimed)
    return agreement_of(rows, draft)


@job("replay-worst", lambda db_url, result, n, *_: f"replay the {n} worst requests")
def replay_worst_job(db_url, result, n: int, target_path: str, draft_path: str, *, progress) -> list:
    """The n worst requests of an observe_requests result (ServedNumbers) replayed: ReplayedRequest each."""
    from backend.service.per_request import replay_worst

    return replay_worst(db_url, result, n, target_path, draft_path, None, progress)


def _name(path: str) -> str:
    from pathlib import Path

    return Path(path).name


# The start functions pages call (each job's parameters are written once, on the job above).
start_probe = probe_job.start
start_diagnose = diagnose_job.start
start_reference = reference_job.start
start_doctor = doctor_job.start
start_train_vs_serve = train_vs_serve_job.start
start_agreement = agreement_job.start
start_replay_worst = replay_worst_job.start
