"""Server numbers beside the replay: read what SGLang or vLLM reported, store it, lint the flags it
ran with, and compare its accept length with SpecLens's offline replays of the same draft.

Network use is only toward a URL the user gives, with a timeout; nothing at start-up.
"""

from __future__ import annotations

import json
import shlex
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

from backend import BadInput
from backend.data.serving import ServingObservation, parse_sglang_log, parse_vllm_metrics
from backend.diagnostics.lint import lint_command
from backend.diagnostics.lint_result import LintFinding
from backend.plain import Plain
from backend.run.request import ReplayRequest
from backend.service.database import open_database
from db import store

MAX_TEXT_BYTES = 64 << 20
TIMEOUT_S = 10.0
AGREEMENT = 0.85  # server / replay accept length below this: the serving side is the suspect


def read_source(source: str) -> tuple[str, str]:
    """(text, name) of a log or metrics file, or of a URL the user gave (with a timeout)."""
    if source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=TIMEOUT_S) as response:  # the user's URL
                return response.read(MAX_TEXT_BYTES).decode("utf-8", "replace"), source
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise BadInput(f"{source}: cannot fetch ({error})") from error
    path = Path(source)
    if not path.is_file():
        raise BadInput(f"{source}: no such file")
    if path.stat().st_size > MAX_TEXT_BYTES:
        raise BadInput(f"{source}: larger than {MAX_TEXT_BYTES >> 20} MiB")
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8"), str(path)
    except UnicodeDecodeError as error:
        raise BadInput(f"{source}: not UTF-8 text") from error


def parse(
    engine: str, texts: list[tuple[str, str]], num_speculative_tokens: int | None = None
) -> ServingObservation:
    """texts: (text, where it came from) of a log, or of one or two metric scrapes."""
    if engine == "sglang":
        return parse_sglang_log("\n".join(t for t, _ in texts), ", ".join(n for _, n in texts))
    if engine == "vllm":
        if len(texts) > 2:
            raise BadInput("give one vLLM scrape (totals) or two (a window: earlier, later)")
        return parse_vllm_metrics(texts, num_speculative_tokens)
    raise BadInput(f"unknown engine {engine!r}; use sglang or vllm")


def serving_command(observation: ServingObservation, draft_path: str | None) -> tuple[str | None, str | None]:
    """The (SGLang, vLLM) command line equivalent to the settings the engine reported."""
    settings = observation.settings
    if observation.engine == "sglang":
        flags = {
            "--model-path": settings.get("model_path"),
            "--speculative-algorithm": settings.get("speculative_algorithm"),
            "--speculative-draft-model-path": draft_path or settings.get("speculative_draft_model_path"),
            "--speculative-num-steps": settings.get("speculative_num_steps"),
            "--speculative-eagle-topk": settings.get("speculative_eagle_topk"),
            "--speculative-num-draft-tokens": settings.get("speculative_num_draft_tokens"),
        }
        parts = [f"{flag} {shlex.quote(str(value))}" for flag, value in flags.items() if value is not None]
        return "python -m sglang.launch_server " + " ".join(parts), None
    config = {
        "method": "eagle3",
        "model": draft_path,
        "num_speculative_tokens": settings.get("num_speculative_tokens"),
    }
    return None, f"vllm serve M --speculative-config {shlex.quote(json.dumps(config))}"


def lint_observation(
    observation: ServingObservation, draft_path: str | None, target_path: str | None
) -> list[LintFinding]:
    """The serving-flag lint on what the engine ran with, plus the engine's own notices of rewrites."""
    findings = [
        LintFinding(
            severity="warning",
            code="engine-rewrote-flags",
            message=f"the server log says: {note}",
            fix="compare the effective settings above with the flags you passed",
        )
        for note in observation.rewrites
    ]
    sglang, vllm = serving_command(observation, draft_path)
    draft = draft_path or observation.settings.get("speculative_draft_model_path")
    if not draft or not Path(draft).is_dir():
        findings.append(
            LintFinding(
                severity="info",
                code="lint-skipped",
                message="the flags were not linted against a draft: give --draft DIR (a local copy)",
                fix="pass the draft directory the server loaded",
            )
        )
        return findings
    try:
        report = lint_command(draft, sglang, vllm, target_path).result()
    except BadInput as error:
        return findings + [LintFinding(severity="info", code="lint-skipped", message=str(error))]
    return findings + report.findings


@dataclass(frozen=True)
class OfflineReplay(Plain):
    """SpecLens's accept length for the draft at the server's shape, pooled over its finished greedy
    replays of that shape (replay_accept_length)."""

    runs: int
    accept_length: float | None
    run_ids: list[int] = field(default_factory=list)  # the first 20
    verify_steps: int = 0
    per_position_marginal: list[float] = field(default_factory=list)
    topk: int = 1


@dataclass(frozen=True)
class ServerComparison(ServingObservation):
    """What the server reported (stored as observation `observation_id`), the flag findings, and the
    offline replay of the same draft at the same K beside it: observe's result."""

    observation_id: int = 0
    lint: list[LintFinding] = field(default_factory=list)
    num_steps: int | None = None
    replay: OfflineReplay = OfflineReplay(runs=0, accept_length=None)
    verdict: str = ""


def replay_accept_length(
    db_url: str | None,
    draft_path: str | None,
    num_steps: int | None,
    topk: int = 1,
    num_draft_tokens: int | None = None,
) -> OfflineReplay:
    """SpecLens's offline accept length for the draft at the server's shape (K, topk, draft tokens):
    pooled over its finished greedy replays of that shape (a chain's N is K + 1 whatever was asked)."""
    if not draft_path:
        return OfflineReplay(runs=0, accept_length=None, topk=topk)
    with store.session_scope(open_database(db_url).factory) as session:
        runs = [
            r
            for r in store.list_runs(session, limit=1000)
            if r.status == "finished"
            and Path(r.draft_path).resolve() == Path(draft_path).resolve()
            and (num_steps is None or r.resolved.num_steps == num_steps)
            and r.resolved.topk == topk
            and (topk == 1 or num_draft_tokens is None or r.resolved.num_draft_tokens == num_draft_tokens)
            and r.resolved.greedy
        ]
    pooled: list[int] = []  # verify steps accepting exactly a drafts, over every run
    for run in runs:
        for a, count in enumerate(run.measured.accept_histogram):
            pooled += [0] * (a + 1 - len(pooled))
            pooled[a] += count
    steps = sum(pooled)
    accepted = sum(a * count for a, count in enumerate(pooled))
    marginal = [sum(pooled[i:]) / steps for i in range(1, len(pooled))] if steps else []
    return OfflineReplay(
        runs=len(runs),
        run_ids=[r.id for r in runs][:20],
        verify_steps=steps,
        accept_length=None if not steps else 1 + accepted / steps,
        per_position_marginal=marginal,
        topk=topk,
    )


def verdict(server: float | None, replay: float | None) -> str:
    if server is None or replay is None:
        return "no comparison: " + (
            "the server gave no accept length"
            if server is None
            else "no finished greedy replay of this draft at the server's K and topk: run one on Decode "
            "or with replay (--steps, --topk, --num-draft-tokens)"
        )
    ratio = server / replay
    if ratio < AGREEMENT:
        return (
            f"the server accepts {100 * (1 - ratio):.0f}% less than the offline replay of the same draft "
            f"({server:.2f} vs {replay:.2f}): the serving side is the suspect; check the engines table "
            "(preflight / Decode), the wiring probe and the flag findings"
        )
    return (
        f"the server and the offline replay agree ({server:.2f} vs {replay:.2f}, ratio {ratio:.2f}): the server "
        "runs this draft as the replay does, so a low accept length is not a serving fault; its cause is in "
        "the draft or its config, which both run: the verdict (Diagnose) names it"
    )


def observe(
    db_url: str | None,
    engine: str,
    sources: list[str],
    draft_path: str | None = None,
    target_path: str | None = None,
    num_speculative_tokens: int | None = None,
) -> ServerComparison:
    """Files or URLs (see read_source) -> observe_texts."""
    return observe_texts(
        db_url, engine, [read_source(s) for s in sources], draft_path, target_path, num_speculative_tokens
    )


def observe_texts(
    db_url: str | None,
    engine: str,
    texts: list[tuple[str, str]],
    draft_path: str | None = None,
    target_path: str | None = None,
    num_speculative_tokens: int | None = None,
) -> ServerComparison:
    """Parse, lint, store, and compare with the offline replays of the same draft at the same K."""
    observation = parse(engine, texts, num_speculative_tokens)
    lint = lint_observation(observation, draft_path, target_path)
    settings = observation.settings
    k = (
        settings.get("speculative_num_steps")
        if engine == "sglang"
        else settings.get("num_speculative_tokens")
    )
    topk = int(settings.get("speculative_eagle_topk") or 1) if engine == "sglang" else 1
    replay = replay_accept_length(db_url, draft_path, k, topk, settings.get("speculative_num_draft_tokens"))
    with store.session_scope(open_database(db_url).factory) as session:
        observation_id = store.add_observation(
            session, observation.to_dict(), draft_path, [f.to_dict() for f in lint]
        )
    return ServerComparison(
        **vars(observation),
        observation_id=observation_id,
        lint=lint,
        num_steps=k,
        replay=replay,
        verdict=verdict(observation.accept_length, replay.accept_length),
    )


def list_observations(db_url: str | None) -> list[dict]:
    with store.session_scope(open_database(db_url).factory) as session:
        return store.list_observations(session)


# ------------------------------------------------------------------------------- serve-check


def check_server_url(url: str) -> None:
    """An http(s) URL with a host, checked before any model is loaded or request sent."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as error:
        raise BadInput(f"--url {url}: not a URL ({error})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(f"--url {url}: expected http://HOST:PORT of the SGLang server")


def request_accept_length(
    url: str, prompt_ids: list[int], max_new_tokens: int, timeout: float = 60.0
) -> dict:
    """One greedy request to SGLang's native /generate; accept length from its meta_info
    (tokenizer_manager.py: spec_accept_length = completion_tokens / spec_verify_ct)."""
    body = json.dumps(
        {"input_ids": prompt_ids, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0}}
    ).encode()
    try:
        request = urllib.request.Request(
            url.rstrip("/") + "/generate", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:  # the user's URL
            answer = json.loads(response.read(MAX_TEXT_BYTES))
    except TimeoutError:
        raise BadInput(
            f"{url}: no answer to /generate within {timeout:g} s; stopping at the first request that times "
            "out (raise --timeout for a slow server)"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        if isinstance(getattr(error, "reason", None), TimeoutError):
            raise BadInput(f"{url}: no answer to /generate within {timeout:g} s (raise --timeout)") from None
        raise BadInput(f"{url}: the request failed ({error})") from error
    answer = answer[0] if isinstance(answer, list) and answer else answer
    if not isinstance(answer, dict):
        raise BadInput(f"{url}: the answer to /generate is not a JSON object ({type(answer).__name__})")
    meta = answer.get("meta_info") or {}
    if not isinstance(meta, dict):
        raise BadInput(f"{url}: the answer's meta_info is not a JSON object")
    tokens, verifies = meta.get("completion_tokens"), meta.get("spec_verify_ct")
    if not isinstance(tokens, int) or not isinstance(verifies, int):
        raise BadInput(
            f"{url}: the answer has no meta_info.completion_tokens / spec_verify_ct (speculative decoding off?)"
        )
    return {
        "completion_tokens": tokens,
        "verify_steps": verifies,
        "accept_length": meta.get("spec_accept_length") or (tokens / verifies if verifies else None),
    }


@dataclass(frozen=True)
class ServeCheckSettings:
    """The replay a server's answers are held against, as one request (`request`: the pair, the drafting
    shape, the answer length, the reading the replay emulates; its prompt stands for each sample's) and
    how long one server request may take."""

    request: ReplayRequest
    timeout: float = 60.0


def check_sample(db_url: str | None, url: str, number: int, sample, settings: ServeCheckSettings) -> dict:
    """One sample's prompt sent to the server, then replayed offline (unrecorded) with the same settings."""
    from backend.service.jobs import run_replay

    asked = settings.request
    served = request_accept_length(url, list(sample.prompt_ids), asked.max_new_tokens, settings.timeout)
    request = replace(
        asked, prompt_ids=tuple(sample.prompt_ids), record=False, sample_ref=f"serve-check #{number}"
    )
    outcome = run_replay(request, db_url)
    return {
        "sample": number,
        "server_accept_length": served["accept_length"],
        "server_tokens": served["completion_tokens"],
        "server_verify_steps": served["verify_steps"],
        "replay_accept_length": outcome.metrics.mean_accept_length,
        "replay_run": outcome.run_id,
    }


def serve_check(
    db_url: str | None, url: str, samples: list, settings: ServeCheckSettings, progress=None
) -> dict:
    """Each sample's prompt sent to the server and replayed offline with the same draft and settings.
    The first request the server leaves unanswered for `settings.timeout` s ends the run (BadInput)."""
    check_server_url(url)
    rows = []
    for number, sample in enumerate(samples):
        if progress:
            progress(number / len(samples), f"sample {number + 1}/{len(samples)}")
        rows.append(check_sample(db_url, url, number, sample, settings))
    server_tokens = sum(r["server_tokens"] for r in rows)
    server_steps = sum(r["server_verify_steps"] for r in rows)
    server = server_tokens / server_steps if server_steps else None
    replays = [r["replay_accept_length"] for r in rows if r["replay_accept_length"] is not None]
    replay = sum(replays) / len(replays) if replays else None
    return {
        "rows": rows,
        "server_mean_accept_length": server,
        "replay_mean_accept_length": replay,
        "verdict": verdict(server, replay),
        "definition": "server: total completion tokens / total verify steps (bonus included); replay: mean "
        "of each sample's accept length (mean of a + 1)",
    }
