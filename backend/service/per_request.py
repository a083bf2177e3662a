"""Per-request server numbers beside the replay: which requests accept badly, and a replay of
exactly those prompts.

Reads a file of engine responses (backend/data/per_request.py), pools it, matches each request whose
prompt SpecLens can recover (prompt ids, or the prompt text with the target's tokenizer) to a
finished replay of the same prompt with the same draft and K, and replays the N worst through the
same job runner the `replay` command uses (backend/service/jobs.py run_replay). Also writes a run
or an evaluation (a list of runs) as ModelOpt's speculation_profile.json; reading one back is
`read_requests(..., format="modelopt")`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from backend import BadInput
from backend.data.per_request import FORMATS, RequestsFile, read_requests
from backend.data.request_numbers import ModelOptProfile, Pooled, RequestNumbers, ServerWindow
from backend.data.step_signature import (
    DraftLengthSignature,
    FirstStepSignature,
    draft_length_signature,
    first_step_signature,
)
from backend.plain import Plain
from backend.service.database import open_database
from backend.service.observations import read_source
from db import store

__all__ = [
    "FORMATS",
    "ServedRequests",
    "ServedNumbers",
    "observe_requests",
    "replay_worst",
    "with_replays",
    "export_profile",
]
DEFAULT_MAX_NEW_TOKENS = 128  # a replay of a served request whose length the file does not give


@dataclass(frozen=True)
class RequestRow(Plain):
    """One served request beside the replay of its prompt, if there is one (match_replays)."""

    request: int  # its index in the file's requests
    record: str
    request_id: str | None
    status: str
    note: str | None
    verify_steps: int | None
    served_accept_length: float | None
    served_acceptance_rate: float | None
    prompt_tokens: int | None
    served_tokens: int | None
    replay_tokens: int | None
    replay_run: int | None
    replay_accept_length: float | None
    served_minus_replay: float | None


@dataclass(frozen=True)
class MatchedReplays(Plain):
    """The finished greedy replays of the draft the requests were held against."""

    runs: int
    matched: int  # requests matched by prompt to one
    accept_lengths: list[float]  # the matched replays', else every replay's
    which: str
    unmatched_text_prompts: str | None = None  # why some prompts stayed without ids


@dataclass(frozen=True)
class ReplayedRequest(Plain):
    """One of the worst requests replayed with the draft at the served K (replay_worst)."""

    request: int
    record: str
    served_accept_length: float | None
    replay_accept_length: float | None
    served_minus_replay: float | None
    replay_tokens: int
    replay_run: int


@dataclass(frozen=True)
class ServedNumbers(Plain):
    """observe_requests: the file read and pooled, each request beside a replay of its prompt, the
    per-step signatures; what `observe --requests --json` prints and the page draws."""

    source: str
    format: str
    requests: list[RequestNumbers]
    pooled: Pooled
    rows: list[RequestRow]
    replay: MatchedReplays
    worst: list[int]  # request indices, lowest served accept length first, that have a prompt
    num_steps: int | None = None
    draft: str | None = None
    skipped_stream_chunks: int = 0
    profile: ModelOptProfile | None = None  # a speculation_profile.json's own numbers
    window: ServerWindow | None = None  # two /server_info reads differenced
    first_step: FirstStepSignature | None = None
    draft_lengths: DraftLengthSignature | None = None
    replayed_worst: list[ReplayedRequest] = field(default_factory=list)


def same_path(a: str | None, b: str | None) -> bool:
    if not (a and b):
        return False
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):  # a symlink loop: compare as written
        return a == b


def greedy_replays(db_url: str | None, draft_path: str | None, k: int | None) -> list:
    """Finished greedy chain replays of the draft (at K when known), newest first."""
    if not draft_path:
        return []
    with store.session_scope(open_database(db_url).factory) as session:
        return [
            r
            for r in store.list_runs(session, limit=5000)
            if r.kind == "replay"
            and r.status == "finished"
            and same_path(r.draft_path, draft_path)
            and (k is None or r.resolved.num_steps == k)
            and r.resolved.greedy_chain
        ]


def recover_prompts(parsed: RequestsFile, target_path: str | None) -> str | None:
    """Fill prompt_ids from prompt text (as plan.prompt_ids tokenizes it) or from a chat
    request's messages (the target's chat template with the generation prompt, as vLLM and SGLang
    render a chat request) with the target's tokenizer; returns why some stay unmatched, if any."""
    pending = [r for r in parsed.requests if r.prompt_ids is None and (r.prompt_text or r.prompt_messages)]
    if not pending:
        return None
    if not target_path:
        return f"{len(pending)} prompts are text or chat messages: give --target so its tokenizer turns them into ids"
    from backend.engine.loading import load_tokenizer

    tokenizer = load_tokenizer(target_path)
    if tokenizer is None:
        return f"{len(pending)} prompts are text or chat messages and {target_path} has no tokenizer"
    unrendered = 0
    for numbers in pending:
        if numbers.prompt_text:
            numbers.prompt_ids = list(tokenizer(numbers.prompt_text)["input_ids"]) or None
            continue
        try:
            ids = tokenizer.apply_chat_template(
                numbers.prompt_messages, add_generation_prompt=True, tokenize=True
            )
        except Exception:  # noqa: BLE001 - no template, or messages it cannot render: the prompt stays unknown
            unrendered += 1
            continue
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        numbers.prompt_ids = [int(i) for i in ids] or None
    if unrendered:
        return f"{unrendered} chat requests could not be rendered with {target_path}'s chat template"
    return None


def match_replays(parsed: RequestsFile, runs: list) -> list[RequestRow]:
    """One row per request: served numbers, and a replay of the same prompt if any: the newest of
    the served length (max new tokens = the tokens the server generated), else the newest."""
    by_prompt: dict[tuple, list] = {}
    for run in runs:  # newest first
        by_prompt.setdefault(tuple(run.prompt_ids or ()), []).append(run)
    rows = []
    for number, r in enumerate(parsed.requests):
        same = by_prompt.get(tuple(r.prompt_ids), []) if r.prompt_ids else []
        as_long = [
            x
            for x in same
            if r.completion_tokens
            and x.request is not None
            and x.request.max_new_tokens == r.completion_tokens
        ]
        run = (as_long or same or [None])[0]
        replayed = run.measured.mean_accept_length if run else None
        rows.append(
            RequestRow(
                request=number,
                record=r.record,
                request_id=r.request_id,
                status=r.status,
                note=r.note,
                verify_steps=r.verify_steps,
                served_accept_length=r.accept_length,
                served_acceptance_rate=r.acceptance_rate,
                prompt_tokens=len(r.prompt_ids) if r.prompt_ids else None,
                served_tokens=r.completion_tokens,  # a replay of another length is a different run
                replay_tokens=len(run.output_ids) if run else None,
                replay_run=run.id if run else None,
                replay_accept_length=replayed,
                served_minus_replay=None
                if replayed is None or r.accept_length is None
                else r.accept_length - replayed,
            )
        )
    return rows


def worst(rows: list[RequestRow], parsed: RequestsFile, n: int) -> list[int]:
    """Indices of the n requests with the lowest served accept length that have a prompt."""
    candidates = [
        row.request
        for row in rows
        if row.served_accept_length is not None and parsed.requests[row.request].prompt_ids
    ]
    return sorted(candidates, key=lambda i: rows[i].served_accept_length)[:n]


def served_k(parsed: RequestsFile) -> int | None:
    return parsed.pooled.num_speculative_tokens


@dataclass(frozen=True)
class ServedRequests:
    """A file of engine responses as the user gave it: a path or URL (`source`, the CLI's --requests
    and the page's path box), or uploaded bytes with their file name (the page); the format and the
    served K where the file does not say them."""

    source: str | None = None
    data: bytes | None = None
    name: str | None = None
    format: str = "auto"
    num_speculative_tokens: int | None = None

    def read(self) -> tuple[str, str]:
        """(text, name); a BadInput names the file and the reason."""
        if self.data is not None:
            try:
                return self.data.decode("utf-8"), self.name or "upload"
            except UnicodeDecodeError:
                raise BadInput(f"{self.name or 'upload'}: not UTF-8 text") from None
        if not self.source:
            raise BadInput("no file of responses: upload one or give a path or URL")
        return read_source(self.source)


def observe_requests(
    db_url: str | None, served: ServedRequests, draft_path: str | None = None, target_path: str | None = None
) -> ServedNumbers:
    """Read, parse, pool, match to replays: what the CLI prints and the page draws."""
    text, name = served.read()
    parsed = read_requests(text, name, served.format, served.num_speculative_tokens)
    k = served_k(parsed) or served.num_speculative_tokens
    unmatched = recover_prompts(parsed, target_path)
    runs = greedy_replays(db_url, draft_path, k)
    rows = match_replays(parsed, runs)
    matched = [row.replay_accept_length for row in rows if row.replay_accept_length is not None]
    replay_lengths = matched or [
        r.measured.mean_accept_length for r in runs if r.measured.mean_accept_length is not None
    ]
    return ServedNumbers(
        source=parsed.source,
        format=parsed.format,
        requests=parsed.requests,
        pooled=parsed.pooled,
        skipped_stream_chunks=parsed.skipped_chunks,
        profile=parsed.profile,
        window=parsed.window,
        rows=rows,
        num_steps=k,
        draft=draft_path,
        replay=MatchedReplays(
            runs=len(runs),
            matched=len(matched),
            accept_lengths=replay_lengths,
            which="replays of the same prompts"
            if matched
            else "every finished greedy replay of the draft at this K (no prompt matched)",
            unmatched_text_prompts=unmatched,
        ),
        worst=worst(rows, parsed, len(rows)),
        first_step=first_step_signature(parsed.requests),
        draft_lengths=draft_length_signature(parsed.requests),
    )


def replay_plan(result: ServedNumbers, n: int) -> tuple[int, list[int]]:
    """(K, the requests to replay) for replay_worst, refused before anything loads."""
    k = result.num_steps
    if k is None:
        raise BadInput(
            f"{result.source}: the file does not say K: give --num-speculative-tokens for the replay"
        )
    chosen = result.worst[:n]
    if not chosen:
        raise BadInput(f"{result.source}: no request has both an accept length and a prompt to replay")
    return k, chosen


def replay_worst(
    db_url: str | None,
    result: ServedNumbers,
    n: int,
    target_path: str,
    draft_path: str,
    max_new_tokens: int | None = None,
    progress=None,
) -> list[ReplayedRequest]:
    """Replay the prompts of the n worst requests with the draft at the served K, through the job
    runner the `replay` command uses; served vs replayed for each (with_replays puts them in the rows)."""
    from backend.run.request import ReplayRequest
    from backend.service.jobs import run_replay

    k, chosen = replay_plan(result, n)
    out = []
    for number, index in enumerate(chosen):
        served = result.requests[index]
        if progress:
            progress(number / len(chosen), f"request {index} ({number + 1}/{len(chosen)})")
        request = ReplayRequest(
            target_path,
            draft_path,
            prompt_ids=tuple(served.prompt_ids),
            num_steps=k,
            max_new_tokens=max_new_tokens or served.completion_tokens or DEFAULT_MAX_NEW_TOKENS,
            sample_ref=f"{result.source} {served.record}",
        )
        outcome = run_replay(request, db_url)
        replayed = outcome.metrics.mean_accept_length
        out.append(
            ReplayedRequest(
                request=index,
                record=served.record,
                served_accept_length=served.accept_length,
                replay_accept_length=replayed,
                served_minus_replay=None if replayed is None else served.accept_length - replayed,
                replay_tokens=len(outcome.output_ids),
                replay_run=outcome.run_id,
            )
        )
    return out


def with_replays(result: ServedNumbers, replayed: list[ReplayedRequest]) -> ServedNumbers:
    """`result` with the replays of its worst requests in their rows and as `replayed_worst`; its
    replayed side becomes the replays of the rows' prompts (what the CLI prints and the page draws)."""
    rows = list(result.rows)
    for row in replayed:
        rows[row.request] = replace(
            rows[row.request],
            replay_run=row.replay_run,
            replay_accept_length=row.replay_accept_length,
            replay_tokens=row.replay_tokens,
            served_minus_replay=row.served_minus_replay,
        )
    lengths = [r.replay_accept_length for r in rows if r.replay_accept_length is not None]
    replay = replace(
        result.replay, accept_lengths=lengths, matched=len(lengths), which="replays of the same prompts"
    )
    return replace(result, rows=rows, replayed_worst=replayed, replay=replay)


# ---------------------------------------------------------------------- ModelOpt profile


def profile_from_runs(db_url: str | None, run_ids: list[int]) -> dict:
    """speculation_profile.json (ModelOpt specdec_bench speculation_profile.py build_profile's schema)
    for finished runs: the pooled accept histogram keyed by a + 1, the step-weighted mean and the
    per-request (per-run) mean, marginal and conditional rates."""
    from backend.run.metrics import acceptance_metrics

    if not run_ids:
        raise BadInput("give the runs to export (--runs ID,ID,...)")
    with store.session_scope(open_database(db_url).factory) as session:
        runs = [store.get_run(session, run_id) for run_id in run_ids]
    for run_id, run in zip(run_ids, runs, strict=True):
        if run is None:
            raise BadInput(f"run {run_id}: no such run")
        if run.status != "finished":
            raise BadInput(f"run {run_id}: {run.status}, not finished")
    pairs = {(Path(r.target_path).resolve(), Path(r.draft_path).resolve()) for r in runs}
    if len(pairs) != 1:
        raise BadInput(f"runs {run_ids} are of different drafts or targets: one profile describes one draft")
    ks = {r.resolved.num_steps for r in runs}
    if len(ks) != 1:
        raise BadInput(f"runs {run_ids} were replayed at different K ({sorted(ks)}): one profile is one K")
    k = ks.pop()
    if any(r.resolved.topk != 1 for r in runs):
        raise BadInput("a tree run's accepted count is not a longest-prefix length: export chain runs only")
    pooled: list[int] = [0] * (k + 1)
    per_run = []
    for run in runs:
        for a, count in enumerate(run.measured.accept_histogram):
            pooled[a] += count
        if run.measured.mean_accept_length is not None:
            per_run.append(run.measured.mean_accept_length)
    steps = [a for a, count in enumerate(pooled) for _ in range(count)]
    if not steps:
        raise BadInput(f"runs {run_ids} have no verify step")
    metrics = acceptance_metrics(steps, k)
    return {
        "schema_version": "1.0",
        "measured": True,
        "producer": "speclens",
        "method": "eagle3",
        "draft_checkpoint": Path(runs[0].draft_path).name,
        "target_model": Path(runs[0].target_path).name,
        "num_speculative_tokens": k,
        "verification_method": "longest_prefix",
        "conditional_accept_rates": [round(x or 0.0, 6) for x in metrics.per_position_conditional],
        "marginal_accept_rates": [round(x, 6) for x in metrics.per_position_marginal],
        "mean_accept_length": round(metrics.mean_accept_length, 6),
        "mean_accept_length_per_request": round(sum(per_run) / len(per_run), 6),
        "accept_length_by_k": {str(k): round(metrics.mean_accept_length, 6)},
        "acceptance_length_histogram": {str(a + 1): c for a, c in enumerate(pooled) if c},
        "per_category": None,
        "measurement_conditions": {
            "engine": "speclens replay (greedy)",
            "runs": run_ids,
            "num_samples": len(runs),
            "max_new_tokens": sorted({r.request.max_new_tokens for r in runs if r.request}),
        },
    }


def export_profile(db_url: str | None, run_ids: list[int], out: str) -> tuple[Path, dict]:
    """Write the runs' profile to OUT (a file, or speculation_profile.json in a folder)."""
    profile = profile_from_runs(db_url, run_ids)
    path = Path(out)
    if path.is_dir():
        path = path / "speculation_profile.json"
    try:
        path.write_text(json.dumps(profile, indent=2) + "\n")
    except OSError as error:
        raise BadInput(f"{out}: cannot write ({error.strerror})") from None
    return path, profile
