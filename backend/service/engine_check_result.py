"""What an engine check found, as stored in its folder (result.json) and read back: per prompt whether
the served and the replayed per-step accepted counts are equal or where they part, the wiring that explains
a difference, how the server was launched, what a GGUF target costs; and a stored check beside a run (Decode)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from backend import BadInput
from backend.plain import Plain
from backend.service.database import open_database
from backend.service.served_engines import served_engine

DEFINITION = (
    "accept length = 1 + accepted drafts / verify steps (vLLM's mean_acceptance_length, llama.cpp's "
    "\"mean len\"; the replay's mean of a + 1 per verify step); per-step counts: vLLM's "
    'metrics.speculative_decoding.per_step_accepted, or llama.cpp\'s trace line "accepted a/ n draft tokens" '
    "(a step without a draft is no verify step), beside the replay's accepted count a of each verify step"
)


@dataclass(frozen=True)
class StepDifference(Plain):
    """The first verify step whose accepted counts differ; a count is None past the end of its run."""

    step: int
    served: int | None
    replay: int | None


@dataclass(frozen=True)
class PromptCheck(Plain):
    """One prompt served and replayed (compare): both accept lengths and per-step counts."""

    prompt: int
    served_accept_length: float | None
    replay_accept_length: float | None
    served_steps: int
    replay_steps: int
    equal_step_for_step: bool
    first_difference: StepDifference | None
    same_tokens: bool | None  # None: the server gave no token ids
    replay_run: int | None
    prompt_ids: list[int]
    served_per_step: list[int]
    served_token_ids: list[int] | None
    replay_per_step: list[int]
    wiring: list[int] = field(default_factory=list)  # the HF layers the replay read


@dataclass(frozen=True)
class WiringExplanation(Plain):
    """The candidate wiring that reproduces the server on every prompt (explain)."""

    aux_hf_indices: list[int]
    why: str


@dataclass(frozen=True)
class ServerLaunch(Plain):
    """How a server launched here was started and what its launch said (served_engines.launch)."""

    command: list[str]
    seconds_to_ready: float | None = None
    log: str | None = None
    aux_layers_line: str | None = None  # vLLM's log line naming the layers it feeds the draft
    converter_layers_line: str | None = None  # llama.cpp's converter line naming them
    target_gguf: str | None = None
    draft_gguf: str | None = None


@dataclass(frozen=True)
class QuantizedRow(Plain):
    prompt: int
    full_accept_length: float | None
    quantized_accept_length: float | None
    first_differing_token: int | None


@dataclass(frozen=True)
class QuantizedCost(Plain):
    """The GGUF target served beside the full-precision one on the same prompts (quantized_cost)."""

    target_gguf: str
    rows: list[QuantizedRow]
    full_mean_accept_length: float | None
    quantized_mean_accept_length: float | None
    launched: ServerLaunch
    said: str


@dataclass(frozen=True)
class StoppedAt(Plain):
    """The prompt a server failed on (in the result.json of a check that ended there)."""

    prompt: int
    why: str


@dataclass(frozen=True)
class EngineCheck(Plain):
    """An engine check: per prompt the served and replayed per-step counts, what they add up to, and the
    wiring that explains a difference; what `serve-check --json` prints, the tab draws and result.json
    keeps."""

    engine: str  # the server: vllm | llamacpp
    url: str
    served_model: str | None
    reading: str  # the reading the replay ran
    num_steps: int
    max_new_tokens: int
    rows: list[PromptCheck]
    definition: str
    folder: str
    wiring: list[int] | None = None  # the first prompt's replayed wiring
    wiring_source: str | None = None
    equal_prompts: int = 0
    prompts: int = 0
    headline: str = ""
    explained_by: WiringExplanation | None = None
    launched: ServerLaunch | None = None  # a server launched here
    quantized: QuantizedCost | None = None  # --target-gguf
    stopped_at: StoppedAt | None = None
    sampling: dict | None = None  # a sampled check's temperature, top_p, top_k, seed (prompt i: seed + i)


@dataclass(frozen=True)
class ServedBeside(Plain):
    """What an engine check served for a run's prompt (served_beside), for the Decode page."""

    engine: str  # the engine's title: vLLM, llama.cpp
    served_per_step: list[int]  # the engine's accepted count per verify step
    served_accept_length: float | None
    check: str  # the check's folder name
    same_run: bool  # the check replayed this very run (else: the same prompt and K)
    url: str | None
    launched: bool  # the check launched the server itself


def served_beside(db_url: str | None, run) -> ServedBeside | None:
    """The newest engine check that served this run's prompt at its K (the run itself, or a greedy replay
    of the same prompt ids beside a greedy check): the engine's per-step accepted counts beside the run's, for the Decode page.
    The stored result.json is read as it is: checks of older versions still show."""
    database = open_database(db_url)
    root = (database.artifact_dir or Path("data")) / "engine-checks"
    if not root.is_dir():
        return None
    k = run.resolved.num_steps
    for result_file in sorted(root.glob("*/result.json"), reverse=True):
        try:
            result = json.loads(result_file.read_text())
        except (OSError, ValueError):
            continue
        for row in result.get("rows", []):
            same_run = row.get("replay_run") == run.id
            same_prompt = (
                not result.get("sampling")  # a sampled answer took its own path: beside its own run only
                and row.get("prompt_ids") == list(run.prompt_ids)
                and result.get("num_steps") == k
                and result.get("reading") == run.resolved.engine  # the same reading: the same accounting
                and run.request is not None
                and result.get("max_new_tokens", run.request.max_new_tokens) == run.request.max_new_tokens
            )
            if same_run or same_prompt:
                return ServedBeside(
                    engine=_title(result.get("engine", "vllm")),
                    served_per_step=row["served_per_step"],
                    served_accept_length=row["served_accept_length"],
                    check=result_file.parent.name,
                    same_run=same_run,
                    url=result.get("url"),
                    launched=bool(result.get("launched")),
                )
    return None


def _title(name: str) -> str:
    """An engine's title as a stored result names it (a result of an engine no longer served: its name)."""
    try:
        return served_engine(name).title
    except BadInput:
        return name
