"""Apply a fix and measure again: a draft and the copy its fix was written to (draft_fix.py), replayed on
the same samples under the reading of the engine the fix is for, as `evaluate` replays them (stored as
runs, resumable), and their accept lengths side by side. Before is what that engine feeds the draft as it
is; after, what it feeds the copy. The engine itself relaunched on the copy is `serve-check --engine E
--launch --draft COPY`, said with the result."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from backend import BadInput
from backend.plain import Plain
from backend.run.records import Progress, no_progress
from backend.service.tasks import job

SAMPLES = 4  # samples replayed before and after, unless asked otherwise


@dataclass(frozen=True)
class FixMeasured(Plain):
    engine: str
    draft: str
    fixed: str
    samples: int
    before: float | None  # pooled accept length (evaluate's), the draft as it is
    after: float | None  # the same, the fixed copy
    runs_before: list[int] = field(default_factory=list)
    runs_after: list[int] = field(default_factory=list)
    relaunch: str = ""  # the command that holds the fix against the engine itself

    @property
    def said(self) -> str:
        def shown(value):
            return "n/a" if value is None else f"{value:.3f}"

        return (
            f"Read as {self.engine} on {self.samples} samples: accept length {shown(self.before)} as the draft is, "
            f"{shown(self.after)} with the fix (pooled over verify steps; runs {self.runs_before} and "
            f"{self.runs_after}). Against the engine itself: {self.relaunch}"
        )


def measure_fix(
    db_url: str | None,
    target: str,
    draft: str,
    fixed: str,
    engine: str,
    samples: list,
    dataset_ref: str,
    progress: Progress = no_progress,
) -> FixMeasured:
    """The draft and its fixed copy replayed on `samples` read as `engine` (a ReplayRequest's engine), with
    a replay's default K and token budget."""
    from backend.run.request import ReplayRequest
    from backend.service.eval_pairs import Plan
    from backend.service.evaluate import evaluate

    if not samples:
        raise BadInput(f"{dataset_ref}: no sample to measure the fix on")
    template = ReplayRequest(target, draft, prompt_ids=tuple(samples[0].prompt_ids), engine=engine)
    for index, sample in enumerate(samples):
        sample.index = getattr(sample, "index", index)
    plan = Plan(template, [draft, fixed], samples, dataset_ref, {draft: "as it is", fixed: "with the fix"})
    result = evaluate(db_url, plan, resume=True, progress=progress)
    before, after = result["drafts"]
    relaunch = (
        f"python -m backend serve-check --engine {engine} --launch --target {target} --draft {fixed} "
        f"--samples {dataset_ref if Path(dataset_ref).is_file() else 'SAMPLES'} --limit {len(samples)}"
        if engine in ("vllm", "llamacpp")
        else f"serve the copy in {fixed} with {engine} and hold it with serve-check --url URL"
    )
    return FixMeasured(
        engine,
        draft,
        str(Path(fixed)),
        len(samples),
        before["pooled_accept_length"],
        after["pooled_accept_length"],
        [s["run_id"] for s in before["per_sample"]],
        [s["run_id"] for s in after["per_sample"]],
        relaunch,
    )


def fixed_dir(db_url: str | None) -> Path:
    """Where the dashboard writes fixed copies: fixed/ beside the database's artifacts."""
    from backend.service.database import open_database

    return open_database(db_url).artifact_dir.parent / "fixed"


@job("fix-measure", lambda db_url, target, draft, engine, *_: f"{engine} fix of {Path(draft).name}: measure")
def fix_measure_job(db_url, target, draft, engine, trained, *, progress: Progress) -> FixMeasured:
    """A verdict's wiring fix for `engine` (the draft trained on HF `trained`) written to a copy under
    fixed/, then the draft and the copy measured on the first SAMPLES samples of the pair's eval set."""
    import uuid

    from backend.drafts.reading_fixes import wiring_fix
    from backend.service.datasets import get_samples, list_datasets, preferred_dataset
    from backend.service.draft_fix import write_fixed_draft

    _, update = wiring_fix(engine, list(trained))
    out = fixed_dir(db_url) / f"{Path(draft).name}-{engine}-fix-{uuid.uuid4().hex[:8]}"
    progress(0.02, f"writing the fixed copy to {out}")
    fixed = write_fixed_draft(draft, out, update)
    dataset = preferred_dataset(db_url, target) or next((d.id for d in list_datasets(db_url)), None)
    if dataset is None:
        raise BadInput("no dataset to measure the fix on: import one on the Samples page")
    samples = get_samples(db_url, dataset, limit=SAMPLES)
    return measure_fix(db_url, target, draft, str(fixed), engine, samples, f"dataset {dataset}", progress)
