"""The replay held against a running engine, step for step: vLLM serves the pair (at a URL, or launched
here on loopback), each prompt is sent as token ids (greedy), and the same prompt is replayed offline
under the engine's reading. Per prompt: both accept lengths, and "equal step for step" or the first
step whose accepted counts differ. Where they differ, candidate readings (the other engines' wirings
and the replayed wiring shifted a layer either way) are replayed until one reproduces the server on
every prompt, and the check names it ("vLLM ran HF [1, 14, 26]").

What is kept, beside the runs: the replays as runs (sample_ref "vllm-check N #i"), and under the
database's artifact folder engine-checks/N/: the raw responses (responses.jsonl, the lines
`observe --requests` reads), the server's log when it was launched here, and result.json.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from backend import BadInput
from backend.data.per_request import Where, parse_one
from backend.service.database import open_database
from backend.service.requests import ReplayRequest

DEFINITION = (
    "accept length = 1 + accepted drafts / verify steps (vLLM's mean_acceptance_length; the replay's "
    "mean of a + 1 per step); per-step counts: vLLM's metrics.speculative_decoding.per_step_accepted "
    "beside the replay's accepted count a of each verify step"
)


@dataclass(frozen=True)
class EngineCheckSettings:
    target_path: str
    draft_path: str
    num_steps: int
    max_new_tokens: int
    engine: str = "vllm"  # the reading the replay runs (vllm: vLLM 0.32's V1 runner, the CPU build's)
    aux_hf_indices: tuple[int, ...] | None = None
    timeout: float = 300.0  # seconds for one completion
    device: str | None = None
    dtype: str | None = None


def check_folder(db_url: str | None) -> Path:
    database = open_database(db_url)
    root = database.artifact_dir or Path("data")
    folder = root / "engine-checks" / time.strftime("%Y%m%d-%H%M%S")
    suffix, candidate = 1, folder
    while candidate.exists():
        suffix += 1
        candidate = folder.with_name(f"{folder.name}-{suffix}")
    candidate.mkdir(parents=True)
    return candidate


def served_steps(exchange: dict, number: int, num_steps: int) -> dict:
    """vLLM's counts for one response, read as `observe --requests` reads a saved line."""
    numbers = parse_one(exchange, Where("vLLM", f"prompt {number}"), "vllm", num_steps)[0]
    if numbers.status != "ok" or numbers.per_step_accepted is None:
        raise BadInput(
            f"vLLM: prompt {number}: no per-step counts ({numbers.note or numbers.status}); launch the server "
            "with --per-request-spec-decode-metrics detailed"
        )
    choices = exchange["response"].get("choices") or [{}]
    return {
        "per_step": numbers.per_step_accepted,
        "accept_length": numbers.accept_length,
        "engine_accept_length": numbers.engine_accept_length,
        "token_ids": choices[0].get("token_ids"),
        "verify_steps": numbers.verify_steps,
    }


def replay_steps(db_url, prompt_ids, settings: EngineCheckSettings, ref: str, aux=None) -> dict:
    from backend.service.jobs import run_replay

    request = ReplayRequest(
        settings.target_path,
        settings.draft_path,
        prompt_ids=tuple(prompt_ids),
        num_steps=settings.num_steps,
        max_new_tokens=settings.max_new_tokens,
        aux_hf_indices=aux if aux is not None else settings.aux_hf_indices,
        record=False,
        engine=settings.engine,
        sample_ref=ref,
        device=settings.device,
        dtype=settings.dtype,
    )
    outcome = run_replay(request, db_url)
    return {
        "per_step": [s.accepted_count for s in outcome.steps],
        "accept_length": outcome.metrics.get("mean_accept_length"),
        "output_ids": outcome.output_ids,
        "run_id": outcome.run_id,
        "wiring": list(outcome.wiring.aux_hf_indices),
        "wiring_source": outcome.wiring.source,
    }


def first_difference(served: list[int], replayed: list[int]) -> int | None:
    for index, (a, b) in enumerate(zip(served, replayed, strict=False)):
        if a != b:
            return index
    return None if len(served) == len(replayed) else min(len(served), len(replayed))


def compare(number: int, served: dict, replayed: dict) -> dict:
    step = first_difference(served["per_step"], replayed["per_step"])
    row = {
        "prompt": number,
        "served_accept_length": served["accept_length"],
        "replay_accept_length": replayed["accept_length"],
        "served_steps": len(served["per_step"]),
        "replay_steps": len(replayed["per_step"]),
        "equal_step_for_step": step is None,
        "first_difference": None,
        "same_tokens": served["token_ids"] == replayed["output_ids"]
        if served["token_ids"] is not None
        else None,
        "replay_run": replayed["run_id"],
        "prompt_ids": list(served.get("prompt_ids") or []),
        "served_per_step": served["per_step"],
        "replay_per_step": replayed["per_step"],
    }
    if step is not None:
        row["first_difference"] = {
            "step": step,
            "served": served["per_step"][step] if step < len(served["per_step"]) else None,
            "replay": replayed["per_step"][step] if step < len(replayed["per_step"]) else None,
        }
    return row


def candidate_wirings(settings: EngineCheckSettings, replayed: list[int]) -> list[tuple[str, tuple]]:
    """Readings to try when the replay and the server differ: every engine's reading of the draft, and
    the replayed wiring shifted one layer down and up."""
    from backend.engine.readings import DESCRIPTIONS, ENGINES, read_as
    from backend.service import models

    target, draft, _ = models.pair(settings.target_path, settings.draft_path, settings.device, settings.dtype)
    found: dict[tuple, str] = {}
    for engine in ENGINES:
        view = read_as(engine, draft.config, target.num_layers, draft.own_embedding is not None)
        found.setdefault(tuple(view.wiring.aux_hf_indices), f"{DESCRIPTIONS[engine]}'s reading")
    for shift in (-1, 1):
        moved = tuple(i + shift for i in replayed)
        if all(0 <= i <= target.num_layers for i in moved):
            found.setdefault(moved, f"the replayed wiring shifted {shift:+d} layer")
    found.pop(tuple(replayed), None)
    return [(why, wiring) for wiring, why in found.items()]


def explain(db_url, prompts: list[list[int]], served: list[dict], rows, settings) -> dict | None:
    """The candidate wiring that reproduces the server on every prompt, tried first on the first prompt
    that differs (a candidate stops at its first miss); None when none does."""
    first = next(r["prompt"] for r in rows if not r["equal_step_for_step"])
    order = [first] + [i for i in range(len(prompts)) if i != first]
    for why, candidate in candidate_wirings(settings, rows[first]["wiring"]):
        ref = f"vllm-check candidate HF {list(candidate)}"
        if all(
            replay_steps(db_url, prompts[i], settings, ref, candidate)["per_step"] == served[i]["per_step"]
            for i in order
        ):
            return {"aux_hf_indices": list(candidate), "why": why}
    return None


def run_check(
    db_url, url: str, samples: list, settings: EngineCheckSettings, folder: Path, progress=None
) -> dict:
    from backend.service.vllm_server import complete, served_model

    model = served_model(url)
    prompts = [list(s.prompt_ids) for s in samples]
    served, rows = [], []
    with (folder / "responses.jsonl").open("w") as saved:
        for number, prompt in enumerate(prompts):
            if progress:
                progress(number / max(1, len(prompts)), f"prompt {number + 1}/{len(prompts)}")
            exchange = complete(url, model, prompt, settings.max_new_tokens, settings.timeout)
            saved.write(json.dumps(exchange) + "\n")
            served.append({**served_steps(exchange, number, settings.num_steps), "prompt_ids": prompt})
            replayed = replay_steps(db_url, prompt, settings, f"vllm-check {folder.name} #{number}")
            row = compare(number, served[-1], replayed)
            row["wiring"] = replayed["wiring"]
            rows.append(row)
    equal = sum(r["equal_step_for_step"] for r in rows)
    result = {
        "engine": "vllm",
        "url": url,
        "served_model": model,
        "reading": settings.engine,
        "num_steps": settings.num_steps,
        "wiring": rows[0]["wiring"] if rows else None,
        "wiring_source": None,
        "rows": rows,
        "equal_prompts": equal,
        "prompts": len(rows),
        "headline": f"the replay reproduces this vLLM on {equal}/{len(rows)} prompts step for step",
        "definition": DEFINITION,
        "explained_by": None,
        "folder": str(folder),
    }
    if equal < len(rows):
        result["explained_by"] = explain(db_url, prompts, served, rows, settings)
        if result["explained_by"]:
            result["headline"] += (
                f"; vLLM ran HF {result['explained_by']['aux_hf_indices']} "
                f"({result['explained_by']['why']}): --aux-hf-indices "
                + ",".join(map(str, result["explained_by"]["aux_hf_indices"]))
                + " reproduces it on every prompt"
            )
        else:
            result["headline"] += "; no candidate wiring reproduces it (the difference is not the wiring)"
    return result


def engine_check(
    db_url: str | None,
    samples: list,
    settings: EngineCheckSettings,
    url: str | None = None,
    python: str | None = None,
    progress=None,
) -> dict:
    """Against the vLLM at `url`, or (url None) one launched here on the pair with `python`."""
    from backend.service.vllm_server import launched_server

    if not samples:
        raise BadInput("no prompts to send")
    folder = check_folder(db_url)
    if url is not None:
        result = run_check(db_url, url, samples, settings, folder, progress)
    else:
        with launched_server(
            settings.target_path,
            settings.draft_path,
            settings.num_steps,
            folder / "server.log",
            python=python,
            progress=progress,
        ) as server:
            try:
                result = run_check(db_url, server.url, samples, settings, folder, progress)
            except BadInput as error:
                raise BadInput(f"{error}; vLLM's log ({server.log_path}): {server.reason()}") from None
            result["launched"] = {
                "command": server.command,
                "seconds_to_ready": round(server.seconds_to_ready, 1),
                "aux_layers_line": next(iter(server.log_lines("auxiliary layers")), None),
            }
    (folder / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def served_beside(db_url: str | None, run) -> dict | None:
    """The newest engine check that served this run's prompt at its K (the run itself, or a greedy replay
    of the same prompt ids): vLLM's per-step accepted counts beside the run's, for the Decode page."""
    database = open_database(db_url)
    root = (database.artifact_dir or Path("data")) / "engine-checks"
    if not root.is_dir():
        return None
    k = run.settings.num_steps
    for result_file in sorted(root.glob("*/result.json"), reverse=True):
        try:
            result = json.loads(result_file.read_text())
        except (OSError, ValueError):
            continue
        for row in result.get("rows", []):
            same_run = row.get("replay_run") == run.id
            same_prompt = row.get("prompt_ids") == list(run.prompt_ids) and result.get("num_steps") == k
            if same_run or same_prompt:
                return {
                    "served_per_step": row["served_per_step"],
                    "served_accept_length": row["served_accept_length"],
                    "check": result_file.parent.name,
                    "same_run": same_run,
                    "url": result.get("url"),
                }
    return None
