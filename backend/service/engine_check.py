"""The replay held against a running engine, step for step: vLLM or llama.cpp serves the pair (at a URL,
or launched here on loopback; served_engines.py says how for each), each prompt is sent as token ids (greedy), and the same prompt is replayed offline
under the engine's reading. Per prompt: both accept lengths, and "equal step for step" or the first
step whose accepted counts differ. Where they differ, candidate readings (the other engines' wirings
and the replayed wiring shifted a layer either way) are replayed until one reproduces the server on
every prompt, and the check names it ("vLLM ran HF [1, 14, 26]"). A server that dies, hangs or answers
something else ends the check in one line naming the engine, its URL or log and the prompt; the prompts
compared before it are kept in result.json.

What is kept, beside the runs: the replays as runs (sample_ref "vllm-check N #i"), and under the
database's artifact folder engine-checks/N/: the raw responses (responses.jsonl, the lines
`observe --requests` reads), the server's log when it was launched here, and result.json.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

from backend import BadInput
from backend.drafts.dflash_config import is_dflash
from backend.run.records import verify_counts
from backend.run.request import ReplayRequest
from backend.service.database import open_database
from backend.service.engine_check_result import (
    DEFINITION,
    EngineCheck,
    PromptCheck,
    QuantizedCost,
    QuantizedRow,
    ServerLaunch,
    StepDifference,
    StoppedAt,
    WiringExplanation,
)
from backend.service.forced_replay import forced_replay, rejected_yet_emitted, sampled_note
from backend.service.served_engines import (
    ServedAnswer,
    ServedEngine,
    ServerOptions,
    engine_for,
    served_engines,
)


@dataclass(frozen=True)
class EngineCheckSettings:
    """The replay an engine is held against, as one request (`request`: the pair, K, max new tokens, the
    reading, which names the engine, a wiring override, device and dtype; its prompt stands for each
    sample's in turn) and what only the engine needs: how long one completion may take, how to run it."""

    request: ReplayRequest
    timeout: float = 300.0  # seconds for one completion
    options: ServerOptions = ServerOptions()

    def __post_init__(self):
        engine_for(self.request.engine)  # an engine runs this reading beside the replay, else BadInput
        if self.request.decoding().shape.topk != 1:
            raise BadInput(
                "the engine check sends chain requests (one draft a step): replay a chain (no --topk)"
            )

    @property
    def sampling(self) -> dict | None:
        """What a sampled request sends (temperature, top_p, top_k, the seed of prompt 0; prompt i gets
        seed + i), None for greedy: the replay is then held along the engine's own output (forced_trace)."""
        names, asked = ("temperature", "top_p", "top_k", "seed"), self.request
        return None if asked.decoding().greedy else {name: getattr(asked, name) for name in names}

    @property
    def served(self) -> ServedEngine:
        """The engine that runs this reading beside the replay."""
        return engine_for(self.request.engine)

    @property
    def server(self) -> str:
        return self.served.name

    @property
    def title(self) -> str:
        return self.served.title


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


def replay_steps(db_url, prompt_ids, settings: EngineCheckSettings, ref: str, aux=None) -> dict:
    from backend.service.jobs import run_replay

    asked = settings.request
    request = replace(
        asked,
        prompt_ids=tuple(prompt_ids),
        aux_hf_indices=aux if aux is not None else asked.aux_hf_indices,
        record=False,
        sample_ref=ref,
    )
    return steps_dict(run_replay(request, db_url))


def steps_dict(outcome, said: str = "") -> dict:
    """What a replay the engine is held against gives: its per-step counts, output, run and wiring."""
    return {
        "per_step": verify_counts(outcome.steps),
        "accept_length": outcome.metrics.mean_accept_length,
        "output_ids": outcome.output_ids,
        "run_id": outcome.run_id,
        "wiring": list(outcome.wiring.aux_hf_indices),
        "wiring_source": outcome.wiring.source + said,
    }


def forced_steps(db_url, prompt_ids, tokens, settings: EngineCheckSettings, ref: str, aux=None) -> dict:
    """A sampled engine's answer replayed along its own output (service/forced_replay.py); the same dict
    as replay_steps."""
    if not tokens:
        raise BadInput(f"{settings.title} answered no tokens for this prompt: nothing to replay along")
    asked = settings.request
    request = replace(
        asked, prompt_ids=tuple(prompt_ids), aux_hf_indices=aux or asked.aux_hf_indices, sample_ref=ref
    )
    outcome = forced_replay(request, list(tokens), f"{settings.title}'s sampled output (forced)", db_url)
    return steps_dict(outcome, "; along the engine's sampled output")


def steps_of(
    db_url, prompt_ids, served: ServedAnswer, settings: EngineCheckSettings, ref: str, aux=None
) -> dict:
    """The replay a served answer is held against: greedy, the replay's own; sampled, along its output."""
    if settings.sampling is None:
        return replay_steps(db_url, prompt_ids, settings, ref, aux)
    return forced_steps(
        db_url, prompt_ids, served.token_ids or [], settings, f"{ref} (its sampled output)", aux
    )


def first_difference(served: list[int], replayed: list[int]) -> int | None:
    for index, (a, b) in enumerate(zip(served, replayed, strict=False)):
        if a != b:
            return index
    return None if len(served) == len(replayed) else min(len(served), len(replayed))


def compare(number: int, prompt: list[int], served: ServedAnswer, replayed: dict) -> PromptCheck:
    step = first_difference(served.per_step, replayed["per_step"])
    difference = None
    if step is not None:
        difference = StepDifference(
            step=step,
            served=served.per_step[step] if step < len(served.per_step) else None,
            replay=replayed["per_step"][step] if step < len(replayed["per_step"]) else None,
        )
    return PromptCheck(
        prompt=number,
        served_accept_length=served.accept_length,
        replay_accept_length=replayed["accept_length"],
        served_steps=len(served.per_step),
        replay_steps=len(replayed["per_step"]),
        equal_step_for_step=step is None,
        first_difference=difference,
        same_tokens=served.token_ids == replayed["output_ids"] if served.token_ids is not None else None,
        replay_run=replayed["run_id"],
        prompt_ids=list(prompt),
        served_per_step=served.per_step,
        served_token_ids=served.token_ids,
        replay_per_step=replayed["per_step"],
        wiring=replayed.get("wiring") or [],
    )


def candidate_wirings(settings: EngineCheckSettings, replayed: list[int]) -> list[tuple[str, tuple]]:
    """Readings to try when the replay and the server differ: every engine's reading of the draft, and
    the replayed wiring shifted one layer down and up."""
    from backend.drafts.readings import DESCRIPTIONS, ENGINES, read_as
    from backend.service import models

    target, draft, _ = models.pair(
        settings.request.target, settings.request.draft, settings.request.device, settings.request.dtype
    )
    if models.is_dflash_draft(draft):  # it reads its config's layers; an override is refused (readings.py)
        return []
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


def explain(
    db_url, prompts: list[list[int]], served: list[ServedAnswer], rows: list[PromptCheck], settings
) -> WiringExplanation | None:
    """The candidate wiring that reproduces the server on every prompt, tried first on the first prompt
    that differs (a candidate stops at its first miss); None when none does."""
    first = next(r.prompt for r in rows if not r.equal_step_for_step)
    order = [first] + [i for i in range(len(prompts)) if i != first]
    for why, candidate in candidate_wirings(settings, rows[first].wiring):
        ref = f"{settings.server}-check candidate HF {list(candidate)}"
        if all(
            steps_of(db_url, prompts[i], served[i], settings, ref, candidate)["per_step"]
            == served[i].per_step
            for i in order
        ):
            return WiringExplanation(aux_hf_indices=list(candidate), why=why)
    return None


def run_check(
    db_url, url: str, samples: list, settings: EngineCheckSettings, folder: Path, log_path=None, progress=None
) -> EngineCheck:
    """Every prompt to the server at `url` and to the replay; the rows so far are in result.json when a
    prompt fails (the BadInput names the prompt)."""
    client = settings.served.connect(url, log_path, settings.timeout)
    prompts = [list(s.prompt_ids) for s in samples]
    served, rows = [], []
    start = EngineCheck(
        engine=settings.server,
        url=url,
        served_model=client.served_model,
        reading=settings.request.engine,
        num_steps=settings.request.num_steps,
        max_new_tokens=settings.request.max_new_tokens,
        rows=rows,
        definition=DEFINITION,
        folder=str(folder),
        sampling=settings.sampling,
    )
    if settings.request.via == "trace":  # every prompt's trace first, every layer (explain tries others)
        from backend.service import traces

        asked = [replace(settings.request, prompt_ids=tuple(p), record=False) for p in prompts]
        traces.prepare(asked, db_url, progress or (lambda *_: None), every_layer=True)
    with (folder / "responses.jsonl").open("w") as saved:
        for number, prompt in enumerate(prompts):
            if progress:
                progress(number / max(1, len(prompts)), f"prompt {number + 1}/{len(prompts)}")
            try:
                sampling = settings.sampling and settings.sampling | {
                    "seed": settings.sampling["seed"] + number
                }
                exchange, answer = client.ask(
                    number, prompt, settings.request.max_new_tokens, settings.request.num_steps, sampling
                )
            except BadInput as error:
                stopped = replace(start, stopped_at=StoppedAt(prompt=number, why=str(error)))
                write_result(folder, summarise(stopped, rows, settings))
                where = f"log {log_path}" if log_path else url
                raise BadInput(
                    f"{error} (prompt {number} of {len(prompts)}; {where}; the prompts compared before it: "
                    f"{len(rows)}, kept in {folder / 'result.json'})"
                ) from None
            saved.write(json.dumps(exchange) + "\n")
            saved.flush()
            served.append(answer)
            replayed = steps_of(
                db_url, prompt, answer, settings, f"{settings.server}-check {folder.name} #{number}"
            )
            rows.append(compare(number, prompt, served[-1], replayed))
    result = summarise(start, rows, settings)
    if result.equal_prompts == len(rows):
        return result
    kept = settings.sampling and rejected_yet_emitted(rows)
    if kept:  # not a reading of the draft: the engine's own verify
        return replace(result, headline=result.headline + kept)
    explained = explain(db_url, prompts, served, rows, settings)
    if explained:
        said = (
            f"; {settings.title} ran HF {explained.aux_hf_indices} ({explained.why}): --aux-hf-indices "
            + ",".join(map(str, explained.aux_hf_indices))
            + " reproduces it on every prompt"
        )
    elif is_dflash(settings.request.draft):
        said = (
            "; a DFlash draft reads its config's layers, so no other wiring is replayed (`probe` names them)"
        )
    else:
        said = "; no candidate wiring reproduces it (the difference is not the wiring)"
    return replace(result, explained_by=explained, headline=result.headline + said)


def summarise(result: EngineCheck, rows: list[PromptCheck], settings: EngineCheckSettings) -> EngineCheck:
    equal = sum(r.equal_step_for_step for r in rows)
    return replace(
        result,
        rows=list(rows),
        wiring=rows[0].wiring if rows else None,
        equal_prompts=equal,
        prompts=len(rows),
        headline=f"the replay reproduces this {settings.title} on {equal}/{len(rows)} prompts step for step"
        + sampled_note(settings.sampling),
    )


def write_result(folder: Path, result: EngineCheck) -> None:
    (folder / "result.json").write_text(json.dumps(result.to_dict(), indent=1) + "\n")


def context_for(samples: list, settings: EngineCheckSettings) -> int:
    """The server's context: the longest prompt, the new tokens and a draft's worth, with room to spare
    (llama-server drafts only while n_ctx - n_tokens - 2 allows)."""
    longest = max(len(s.prompt_ids) for s in samples)
    return max(512, longest + settings.request.max_new_tokens + settings.request.num_steps + 16)


def engine_check(
    db_url: str | None,
    samples: list,
    settings: EngineCheckSettings,
    url: str | None = None,
    progress=None,
) -> EngineCheck:
    """Against the server at `url`, or (url None) one launched here on the pair. With a GGUF target
    (options.target_gguf, llama.cpp), the replay is held against the converted full-precision target
    served by llama.cpp, and the GGUF served next on the same prompts: what its quantization costs."""
    if not samples:
        raise BadInput("no prompts to send")
    if settings.options.target_gguf and settings.sampling:
        raise BadInput("--target-gguf compares the two targets' greedy outputs: drop --temperature")
    folder = check_folder(db_url)
    if url is not None:
        log = settings.options.server_log
        result = run_check(db_url, url, samples, settings, folder, Path(log) if log else None, progress)
    else:
        full = replace(settings, options=replace(settings.options, target_gguf=None))
        result = launched_check(db_url, samples, full, folder, "server.log", progress)
        if settings.options.target_gguf:
            result = replace(result, quantized=quantized_cost(samples, settings, folder, result, progress))
    write_result(folder, result)
    return result


def served_here(samples, settings: EngineCheckSettings, log_path: Path, progress):
    """The settings' engine launched on loopback on the pair, its context fitted to the samples."""
    return settings.served.launch(
        settings.request.target,
        settings.request.draft,
        settings.request.num_steps,
        log_path,
        settings.options,
        context_for(samples, settings),
        progress,
    )


def launched_check(
    db_url, samples, settings: EngineCheckSettings, folder: Path, log_name: str, progress
) -> EngineCheck:
    with served_here(samples, settings, folder / log_name, progress) as (server, said):
        try:
            result = run_check(db_url, server.url, samples, settings, folder, server.log_path, progress)
        except BadInput as error:
            state = "it exited" if not server.alive() else "its log says"
            raise BadInput(f"{error}; {state} ({server.log_path}): {server.reason()}") from None
        launched = ServerLaunch(
            command=server.command,
            seconds_to_ready=round(server.seconds_to_ready, 1),
            log=str(server.log_path),
            **said,
        )
    return replace(result, launched=launched)


def quantized_cost(
    samples, settings: EngineCheckSettings, folder: Path, full: EngineCheck, progress
) -> QuantizedCost:
    """The user's GGUF target served by llama.cpp with the same draft on the same prompts, beside the
    full-precision target's served run: per prompt both accept lengths and the first token where the
    outputs part (the precision class, measured on the engine itself)."""
    if not settings.served.serves_gguf_targets:
        serving = [e.name for e in served_engines() if e.serves_gguf_targets]
        raise BadInput(
            f"--target-gguf: {settings.title} serves no GGUF target; use --engine {' / '.join(serving)}"
        )
    rows = []
    with served_here(samples, settings, folder / "server-quantized.log", progress) as (server, said):
        client = settings.served.connect(server.url, server.log_path, settings.timeout)
        with (folder / "responses-quantized.jsonl").open("w") as saved:
            for number, sample in enumerate(samples):
                exchange, answer = client.ask(
                    number,
                    list(sample.prompt_ids),
                    settings.request.max_new_tokens,
                    settings.request.num_steps,
                )
                saved.write(json.dumps(exchange) + "\n")
                reference = full.rows[number]
                ours, theirs = answer.token_ids, reference.served_token_ids
                first = first_difference(ours, theirs)  # the first token where the outputs part
                rows.append(
                    QuantizedRow(
                        prompt=number,
                        full_accept_length=reference.served_accept_length,
                        quantized_accept_length=answer.accept_length,
                        first_differing_token=first,
                    )
                )
    full_mean = [r.full_accept_length for r in rows if r.full_accept_length is not None]
    quant_mean = [r.quantized_accept_length for r in rows if r.quantized_accept_length is not None]
    return QuantizedCost(
        target_gguf=settings.options.target_gguf,
        rows=rows,
        full_mean_accept_length=sum(full_mean) / len(full_mean) if full_mean else None,
        quantized_mean_accept_length=sum(quant_mean) / len(quant_mean) if quant_mean else None,
        launched=ServerLaunch(command=server.command, **said),
        said="the quantized target's accept length per prompt beside the full-precision (F32) target's, "
        "both served by llama.cpp with the same draft: the difference is what the quantization costs "
        "(precision class)",
    )
