"""Where acceptance is lost over a set of stored runs (backend/diagnostics/where_lost.py), read from the
store: the runs grouped by their draft, each sample's source, the target's tokenizer for the token
kinds. Torch-free: the CLI's `lost` view, `evaluate --json` and the dashboard call it."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from backend import BadInput
from backend.diagnostics.threshold_whatif import best
from backend.diagnostics.where_lost import MIN_ATTEMPTS, where_lost
from backend.diagnostics.where_lost_result import DEFINITIONS, LostRun, WhereLost
from backend.diagnostics.where_lost_tree import sampled_positions, tree_depths
from backend.run.run_value import id_ranges
from backend.service.database import open_database
from backend.service.runs import file_sample_source, target_vocab_size, token_text
from db import store

THRESHOLD_ASSUMPTIONS = DEFINITIONS["threshold_whatif"]
__all__ = [
    "DEFINITIONS",
    "MIN_ATTEMPTS",
    "WhereLost",
    "choices",
    "chosen_runs",
    "where_lost_file",
    "where_lost_over",
]


def where_lost_over(db_url: str | None, run_ids: list[int]) -> WhereLost:
    """The losses of the runs `run_ids`, one group per draft (in the order the runs name them).
    BadInput for an unknown run, or runs of more than one target (one tokenizer reads the kinds)."""
    if not run_ids:
        raise BadInput("no run to read: give run ids (e.g. 12-43)")
    with store.session_scope(open_database(db_url).factory) as session:
        runs = []
        for run_id in dict.fromkeys(run_ids):
            run = store.get_run(session, run_id)
            if run is None:
                raise BadInput(f"run {run_id}: no such run in {db_url or 'the default database'}")
            runs.append((run, store.get_steps(session, run_id)))
        sources = store.sample_sources(session, [run.sample_id for run, _ in runs])
    targets = sorted(
        {_resolved(run.target_path) for run, _ in runs}
    )  # one target, however its path is spelled
    if len(targets) > 1:
        raise BadInput(
            f"runs of {len(targets)} targets ({', '.join(targets)}): read one target's runs at a time"
        )
    grouped: dict[str, list[LostRun]] = {}
    names = _draft_names([_resolved(run.draft_path) for run, _ in runs])
    for run, steps in runs:
        if run.sample_id in sources:
            source = sources[run.sample_id] or "no source field"
        else:
            source = _source_of(run.sample_ref, run.sample_id is not None, target_vocab_size(targets[0]))
        lost = LostRun(
            run.id, steps, source, run.resolved.greedy_chain, tuple(run.prompt_ids), run.resolved.draft_method
        )
        grouped.setdefault(names[_resolved(run.draft_path)], []).append(lost)
    found = where_lost(grouped, _one_token_text(targets[0]), special_ids(targets[0]))
    return _mixed(_with_trees(found, grouped), runs, names)


def _with_trees(found: WhereLost, grouped: dict[str, list[LostRun]]) -> WhereLost:
    """Each draft's tree steps per depth and branch, and its sampled chains realised vs expected
    (backend/diagnostics/where_lost_tree.py)."""
    drafts = []
    for losses in found.drafts:
        steps = [step for run in grouped[losses.name] for step in run.steps]
        drafts.append(
            replace(losses, tree_depths=tree_depths(steps), sampled_positions=sampled_positions(steps))
        )
    return replace(found, drafts=drafts)


def _mixed(found: WhereLost, runs: list, names: dict[str, str]) -> WhereLost:
    """Each draft's losses with a note where its runs mixed draft lengths, decoding modes or
    unfinished runs (the CLI reads any ids it is given; the page asks for one K and mode), and where
    they replayed over traces."""
    from dataclasses import replace

    drafts = []
    for draft in found.drafts:
        mine = [run for run, _ in runs if names[_resolved(run.draft_path)] == draft.name]
        said = []
        ks = sorted({run.resolved.num_steps for run in mine})
        modes = sorted({run.resolved.mode for run in mine})
        if len(ks) > 1:
            said.append(
                f"runs of K {', '.join(map(str, ks))} pooled: read one K at a time to compare positions"
            )
        if len(modes) > 1:
            said.append(f"runs decoded as {', '.join(modes)} pooled")
        sides = sorted(
            {
                run.resolved.target_forward
                for run in mine
                if (run.resolved.target_forward or "").startswith("trace")
            }
        )
        if sides:  # a run over a trace says so: the target computed once per sample (docs/traces.md)
            traced = sum((run.resolved.target_forward or "").startswith("trace") for run in mine)
            said.append(f"{traced} of {len(mine)} runs replayed over a {'; a '.join(sides)}")
        unfinished = sum(run.status != "finished" for run in mine)
        if unfinished:
            said.append(f"{unfinished} of {len(mine)} runs did not finish: their stored steps are counted")
        drafts.append(replace(draft, notes=[*draft.notes, *said]) if said else draft)
    return replace(found, drafts=drafts)


def _source_of(sample_ref: str | None, had_sample: bool, vocab_size: int | None = None) -> str:
    """The source of a run's sample that is not (or no longer) in the store: a samples file's record
    ("path#index", as `evaluate` and `replay --samples` name it), a typed prompt, or said unknown."""
    if had_sample:
        return "sample deleted"
    if not sample_ref or sample_ref == "prompt":
        return "typed prompt"
    found = file_sample_source(sample_ref, vocab_size)  # shared with the Runs page's search
    if found is not None:
        return found or "no source field"
    path = sample_ref.rpartition("#")[0]
    return f"{Path(path or sample_ref).name} (source not read)"


@lru_cache(maxsize=4096)
def _resolved(path: str) -> str:
    """A checkpoint directory as one string however a run spelled it (relative from a CLI, absolute)."""
    return str(Path(path).resolve())


def _draft_names(paths: list[str]) -> dict[str, str]:
    """Each draft's folder name, or its path where two drafts share a name."""
    short = {path: Path(path).name or path for path in paths}
    clash = {name for name in short.values() if len({p for p in short if short[p] == name}) > 1}
    return {path: path if name in clash else name for path, name in short.items()}


def _one_token_text(target_path: str):
    """One token id's text with the target's tokenizer; None when it has none or it cannot be read."""
    decode = token_text(target_path)
    return (lambda token: decode([token])) if decode else None


@lru_cache(maxsize=8)
def special_ids(target_path: str) -> frozenset[int]:
    """The target tokenizer's special tokens (tokenizer.json's added tokens marked special)."""
    path = Path(target_path) / "tokenizer.json"
    try:
        added = json.loads(path.read_text(encoding="utf-8")).get("added_tokens") or []
    except (OSError, ValueError, AttributeError):
        return frozenset()
    if not isinstance(added, list):
        return frozenset()
    return frozenset(
        t["id"] for t in added if isinstance(t, dict) and t.get("special") and isinstance(t.get("id"), int)
    )


@dataclass(frozen=True)
class LossChoices:
    """What the stored runs of one target offer the Where-lost page: drafts (name -> path) newest
    first, the draft lengths K and the decoding modes they ran (the most run first), the datasets
    their samples came from (id -> name)."""

    drafts: dict[str, str]
    ks: list[int]
    datasets: dict[int, str]
    modes: list[str]
    runs: tuple = field(default=(), repr=False)  # the finished runs these were read from (chosen_runs)


def _finished(db_url: str | None, target_path: str) -> list:
    from backend.service.runs import list_runs

    same = _resolved(target_path)
    return [
        r
        for r in list_runs(db_url, limit=5000)
        if r.kind == "replay" and r.status == "finished" and _resolved(r.target_path) == same
    ]


def choices(db_url: str | None, target_path: str) -> LossChoices:
    from backend.service.datasets import list_datasets

    runs = _finished(db_url, target_path)
    paths = list(dict.fromkeys(_resolved(r.draft_path) for r in runs))
    names = _draft_names(paths)
    ks = [k for k, _ in Counter(r.resolved.num_steps for r in runs).most_common()]  # the most run first
    with store.session_scope(open_database(db_url).factory) as session:
        used = set(store.sample_datasets(session, [r.sample_id for r in runs]).values())
    datasets = {d.id: d.name for d in list_datasets(db_url) if d.id in used}
    modes = [m for m, _ in Counter(r.resolved.mode for r in runs).most_common()]
    return LossChoices({names[p]: p for p in paths}, ks, datasets, modes, tuple(runs))


def chosen_runs(
    db_url: str | None,
    offered: LossChoices,
    draft_paths: list[str],
    k: int | None,
    dataset_id: int | None = None,
    mode: str | None = None,
) -> list[int]:
    """The finished replays of these drafts at K = `k`, decoded as `mode` (chain greedy, a tree,
    sampled: one at a time; None: any) and on `dataset_id`'s samples when given; `k` None: each draft
    at its own most-run K and decoding (an EAGLE-3 draft at K 4 beside a DFlash draft at its block's 7).
    One run per draft and prompt, so a prompt replayed twice counts once: the one with the most verify
    steps (the most evidence; the newest of those)."""
    wanted = {_resolved(p) for p in draft_paths}
    mine = [r for r in offered.runs if _resolved(r.draft_path) in wanted]  # read once, by choices
    if k is None:
        shapes = {}
        for path in wanted:
            counts = Counter(
                (r.resolved.num_steps, r.resolved.mode) for r in mine if _resolved(r.draft_path) == path
            )
            if counts:
                shapes[path] = counts.most_common(1)[0][0]
        runs = [
            r for r in mine if shapes.get(_resolved(r.draft_path)) == (r.resolved.num_steps, r.resolved.mode)
        ]
    else:
        runs = [r for r in mine if r.resolved.num_steps == k and (mode is None or r.resolved.mode == mode)]
    if dataset_id is not None:
        with store.session_scope(open_database(db_url).factory) as session:
            of = store.sample_datasets(session, [r.sample_id for r in runs])
        runs = [r for r in runs if of.get(r.sample_id) == dataset_id]
    kept = {}
    for r in runs:  # newest first (list_runs' order): a later run of as many steps does not replace it
        key = (_resolved(r.draft_path), tuple(r.prompt_ids))
        if key not in kept or r.step_count > kept[key].step_count:
            kept[key] = r
    return sorted(r.id for r in kept.values())


SPLITS = ("by_kind", "by_entropy", "by_confidence", "by_context", "by_source", "by_span", "by_block")
TABLE_FORMATS = ("csv", "parquet")


def where_lost_table(found: WhereLost):
    """Every number of `found` as one long table (a row per draft, split and group; the positions, the top
    rejected tokens, the threshold what-if, the runs counted and the calibration bins too), each row naming
    the definition it is computed by: what the page's downloads and `lost --out` write."""
    import pandas as pd

    rows = []
    for d in found.drafts:
        for p in d.by_position:
            low, high = p.marginal_ci95 or (None, None)
            rows.append(
                dict(draft=d.name, split="by_position", group=f"d{p.position}", attempts=p.steps, accepted=None,
                     share=None, rate=p.marginal_mean, ci95_low=low, ci95_high=high, samples=p.samples,
                     definition="position_marginal", note=f"pooled {p.marginal}; conditional {p.conditional}")
            )  # fmt: skip
        for split in SPLITS:
            for g in getattr(d, split):
                low, high = g.ci95 or (None, None)
                rows.append(
                    dict(draft=d.name, split=split, group=g.group, attempts=g.attempts, accepted=g.accepted,
                         share=g.share, rate=g.rate, ci95_low=low, ci95_high=high, samples=g.samples,
                         definition="group_rate", note=g.note)
                )  # fmt: skip
        for t in d.top_rejected:
            rows.append(
                dict(draft=d.name, split="top_rejected", group=f"{t.text!r} (id {t.token_id}, {t.kind})",
                     attempts=None, accepted=None, share=None, rate=None, ci95_low=None, ci95_high=None,
                     samples=None, definition="top_rejected", note=f"{t.rejections} rejections; first at "
                     + ", ".join(f"run {r} step {i}" for r, i in t.examples))
            )  # fmt: skip
        for w in d.threshold_whatif:
            rows.append(
                dict(draft=d.name, split="threshold_whatif",
                     group="as run" if w.threshold is None else f"stop below p {w.threshold:g}",
                     attempts=None, accepted=None, share=None, rate=w.accept_length, ci95_low=None,
                     ci95_high=None, samples=None, definition="threshold_whatif",
                     note=f"drafts per step {w.drafts_per_step}; wasted drafts {w.wasted_drafts}; "
                     f"accepted drafts lost {w.accepted_lost}; predicted speed-up {w.speedup}")
            )  # fmt: skip
        rows.append(
            dict(draft=d.name, split="runs", group=id_ranges(d.run_ids), attempts=d.attempts, accepted=None,
                 share=None, rate=None, ci95_low=None, ci95_high=None, samples=d.runs, definition="runs",
                 note=f"{d.runs} runs, {d.verify_steps} verify steps (lost --runs takes the group)")
        )  # fmt: skip
        for c in d.calibration:
            where = "all positions" if c.position is None else f"d{c.position}"
            for b in c.bins:
                rows.append(
                    dict(draft=d.name, split="calibration", group=f"{where}, p in [{b.low:.1f}, {b.high:.1f})",
                         attempts=b.attempts, accepted=None, share=None, rate=b.acceptance, ci95_low=None,
                         ci95_high=None, samples=None, definition="calibration",
                         note=f"mean draft probability {b.mean_probability}; ECE of {where} {c.ece}; "
                         f"Brier {c.brier}; AUROC {c.auroc}")
                )  # fmt: skip
    return pd.DataFrame(rows)


def where_lost_file(found: WhereLost, format: str) -> bytes:
    """`where_lost_table` as CSV or Parquet bytes."""
    import io

    if format not in TABLE_FORMATS:
        raise BadInput(f"unknown format {format!r}; use one of {', '.join(TABLE_FORMATS)}")
    table = where_lost_table(found)
    if format == "csv":
        return table.to_csv(index=False).encode()
    buffer = io.BytesIO()
    table.to_parquet(buffer, index=False)
    return buffer.getvalue()


def best_thresholds(found: WhereLost) -> list[str]:
    """Per draft (the page and `lost` say them under the what-if), the threshold with the highest predicted speed-up, against the run as it was."""
    said = []
    for d in found.drafts:
        top, as_run = best(d.threshold_whatif), d.threshold_whatif[0] if d.threshold_whatif else None
        if top is None or as_run is None or as_run.speedup is None:
            continue
        if top.threshold is None:
            said.append(
                f"{d.name}: no threshold beats drafting every step (predicted speed-up {as_run.speedup:.2f})."
            )
        else:
            said.append(
                f"{d.name}: stopping below p = {top.threshold:.1f} predicts the most, speed-up {top.speedup:.2f} "
                f"against {as_run.speedup:.2f} as run (accept length {top.accept_length:.2f} vs {as_run.accept_length:.2f}, "
                f"{top.drafts_per_step:.2f} drafts per step vs {as_run.drafts_per_step:.2f})."
            )
    return said


def shapes_of(offered: LossChoices, run_ids: list[int]) -> list[str]:
    """Each chosen draft's K and decoding in words ("final: K=4, chain greedy"), for runs picked at each
    draft's own (chosen_runs with k None)."""
    names = {_resolved(path): name for name, path in offered.drafts.items()}
    chosen = set(run_ids)
    seen = dict.fromkeys(
        (names.get(_resolved(r.draft_path), r.draft_path), r.resolved.num_steps, r.resolved.mode)
        for r in offered.runs
        if r.id in chosen
    )
    return [f"{name}: K={k}, {mode}" for name, k, mode in seen]
