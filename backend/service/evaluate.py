"""Judge drafts on a dataset, not a sample: replay every (draft, sample) pair with the same settings,
store each as a run, and sum them up per draft.

Resumable: a pair whose finished run already exists with the same target, draft, prompt and settings
(`runs.find_finished_run`) is read back, not replayed, so an interrupted evaluation continues where
it stopped. Locally the pairs run one after another in this process (models loaded once, by
backend.service.models); `backend.service.ray_eval` fans the same pairs out to Ray actors that write
to the same database, and this module's `summarise` reads the runs back either way, so both paths
print the same table for the same runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from backend import BadInput
from backend.run.metrics import definitions, mean_ci95
from backend.run.records import Progress, no_progress
from backend.run.run_value import id_ranges
from backend.service.eval_pairs import Pair, Plan, existing_run

WORST = 5  # samples listed per draft, lowest accept length first

DEFINITIONS = definitions(  # evaluate's keys, from the one DEFINITIONS
    {
        "mean_accept_length": "mean_accept_length_over_prompts",
        "mean_accept_length_ci95": "mean_ci95",
        "pooled_accept_length": "pooled_accept_length",
        "per_position_marginal": "per_position_marginal",
        "tokens_per_s": "tokens_per_s",
    }
)


@dataclass(frozen=True)
class Where:
    """Where the pairs replay: in this process, each draft's samples in batches of `batch` (None: as
    many as memory holds, backend/service/batch_jobs.py; 1: one at a time), or on Ray (`ray`: an
    address or 'local', `workers` actors, waiting at most `ray_timeout` s for the cluster)."""

    ray: str | None = None
    workers: int | None = None
    ray_timeout: float | None = None
    batch: int | None = None


def run_pairs(
    db_url: str | None,
    pairs: list[Pair],
    resume: bool = True,
    progress: Progress = no_progress,
    where: Where = Where(),
    stats: dict | None = None,
    hook=None,
) -> tuple[dict[Pair, int], int]:
    """Every pair's run id (replayed now, or found stored when `resume`) and how many were found,
    replayed `where` says (`hook`: on Ray, ray_eval.run_pairs_on_ray's)."""
    if where.ray:
        from backend.service.ray_eval import RAY_CONNECT_TIMEOUT_S, Cluster, run_pairs_on_ray

        timeout = RAY_CONNECT_TIMEOUT_S if where.ray_timeout is None else where.ray_timeout
        cluster = Cluster(where.ray, where.workers, timeout)
        return run_pairs_on_ray(db_url, pairs, cluster, resume, progress, hook, stats)
    from backend.service.batch_jobs import run_in_batches

    run_ids, todo, answers, first_asking = {}, [], {}, {}
    for pair in pairs:
        found = existing_run(db_url, pair) if resume else None
        if found is not None:
            run_ids[pair] = found.id
        elif resume and pair.request in first_asking:  # asks for the run another pair here will store
            answers[first_asking[pair.request]].append(pair)
        else:
            first_asking.setdefault(pair.request, pair)
            answers[pair] = [pair]
            todo.append(pair)
    reused = len(pairs) - len(todo)
    done = len(run_ids)
    progress(done / max(1, len(pairs)), f"{reused} already stored")
    for draft in dict.fromkeys(pair.draft for pair in todo):
        mine = [pair for pair in todo if pair.draft == draft]

        def inner(
            fraction: float, message: str, mine=mine, done=done, name=Path(draft).name or draft
        ) -> None:
            progress((done + min(1.0, max(0.0, fraction)) * len(mine)) / len(pairs), f"{name}: {message}")

        outcomes = run_in_batches([pair.request for pair in mine], db_url, where.batch, inner)
        for pair, outcome in zip(mine, outcomes, strict=True):
            run_ids.update(dict.fromkeys(answers[pair], outcome.run_id))
            done += len(answers[pair])
        progress(done / len(pairs), f"{done}/{len(pairs)} pairs ({reused} already stored)")
    return {pair: run_ids[pair] for pair in pairs}, reused


def evaluate(
    db_url: str | None,
    plan: Plan,
    resume: bool = True,
    progress: Progress = no_progress,
    where: Where = Where(),
    hook=None,
) -> dict:
    """Every pair of the plan, replayed `where` says, then the per-draft summary (`hook`: on Ray, called
    after each finished pair: ray_eval.run_pairs_on_ray)."""
    pairs = plan.pairs()
    stats: dict = {}  # on Ray: workers started, pairs retried
    run_ids, reused = run_pairs(db_url, pairs, resume, progress, where, stats, hook)
    from backend.service.where_lost import where_lost_over

    # where each draft lost acceptance over these runs (`lost --runs` prints it for any runs)
    try:  # whatever it meets, the evaluation's own numbers are never lost to it
        lost = where_lost_over(db_url, sorted(run_ids.values())).to_dict() if run_ids else None
    except (BadInput, ValueError, TypeError) as error:
        lost = {"error": str(error)}
    summary = summarise(db_url, plan, run_ids, reused, len(pairs) - reused)
    return {**summary, "where_lost": lost, "ray": where.ray or None, **stats}


def summarise(db_url: str | None, plan: Plan, run_ids: dict, reused: int, replayed: int) -> dict:
    """Per draft: mean and pooled accept length, per-position acceptance, tokens/s and the worst
    samples, read back from the stored runs (so a local and a Ray evaluation agree)."""
    from backend.service.runs import get_run

    drafts = []
    for draft in plan.drafts:
        rows, histogram, tokens, decode_ms = [], [], 0, 0.0
        for pair, run_id in run_ids.items():
            if pair.draft != draft:
                continue
            run = get_run(db_url, run_id)
            metrics = run.measured
            hist = metrics.accept_histogram
            histogram = [a + b for a, b in zip_longest(histogram, hist, fillvalue=0)]
            tokens += len(run.output_ids)
            decode_ms += metrics.draft_ms_total + metrics.verify_ms_total
            rows.append(
                {
                    "sample": pair.sample_index,
                    "run_id": run_id,
                    "accept_length": metrics.mean_accept_length,
                    "verify_steps": sum(hist),
                    "tokens": len(run.output_ids),
                }
            )
        rows.sort(key=lambda r: r["sample"])
        drafts.append(draft_row(draft, plan.names.get(draft, draft), rows, histogram, tokens, decode_ms))
    return {
        "target": plan.target,
        "settings": plan.template.settings(),
        "samples": len(plan.samples),
        "drafts": drafts,
        "reused": reused,
        "replayed": replayed,
        "definitions": DEFINITIONS,
    }


def draft_row(
    draft: str, name: str, rows: list[dict], histogram: list[int], tokens: int, decode_ms: float
) -> dict:
    lengths = [r["accept_length"] for r in rows if r["accept_length"] is not None]
    steps = sum(histogram)
    reached = [sum(histogram[i:]) for i in range(len(histogram))]
    return {
        "draft": draft,
        "name": name,
        "runs": len(rows),
        "mean_accept_length": sum(lengths) / len(lengths) if lengths else None,
        "mean_accept_length_ci95": mean_ci95(lengths),
        "pooled_accept_length": (sum(a * n for a, n in enumerate(histogram)) / steps + 1.0)
        if steps
        else None,
        "per_position_marginal": [reached[i] / steps for i in range(1, len(histogram))] if steps else [],
        "verify_steps": steps,
        "tokens": tokens,
        "tokens_per_s": tokens / (decode_ms / 1000.0) if decode_ms > 0 else None,
        "worst": sorted(
            [r for r in rows if r["accept_length"] is not None],
            key=lambda r: (r["accept_length"], r["sample"]),
        )[:WORST],
        "per_sample": rows,
    }


def interval(ci: list[float] | None) -> str:
    return "-" if ci is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def table(result: dict) -> str:
    """The per-draft table the CLI prints."""
    k = max((len(d["per_position_marginal"]) for d in result["drafts"]), default=0)
    head = [
        "draft",
        "runs",
        "mean AL",
        "95% CI",
        "pooled AL",
        *[f"P(a>={i})" for i in range(1, k + 1)],
        "tok/s",
        "worst samples (AL)",
        "runs (lost --runs)",
    ]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    fmt = lambda v, d=2: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    for d in result["drafts"]:
        marginal = d["per_position_marginal"] + [None] * (k - len(d["per_position_marginal"]))
        worst = ", ".join(f"#{w['sample']} ({w['accept_length']:.2f})" for w in d["worst"])
        lines.append(
            " | ".join(
                [
                    d["name"],
                    str(d["runs"]),
                    fmt(d["mean_accept_length"]),
                    interval(d.get("mean_accept_length_ci95")),
                ]
                + [fmt(d["pooled_accept_length"])]
                + [fmt(m, 3) for m in marginal]
                + [fmt(d["tokens_per_s"], 1), worst, id_ranges(r["run_id"] for r in d["per_sample"])]
            )
        )
    return "\n".join(lines)
