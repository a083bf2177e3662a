"""The engines SpecLens runs beside the replay, behind one interface (`ServedEngine`): how to launch one on
the pair, how to connect to one at a URL, how to ask it for one greedy completion, and what its per-step
accepted counts are (`ServedAnswer`, one type for every engine). Each engine is one module that declares
its `ENGINE` (vllm_server.py, llamacpp_server.py); nothing outside those modules branches on an engine's
name: engine_check.py, the CLI and the dashboard ask the engine object.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Protocol

from backend import BadInput

ENGINE_MODULES = {  # engine name -> the module that declares it (imported when the engine is asked for)
    "vllm": "backend.service.vllm_server",
    "llamacpp": "backend.service.llamacpp_server",
}


@dataclass(frozen=True)
class ServerOptions:
    """How to run an engine here; each field is read by the engines that name it in `own_options` (a field
    another engine does not read is refused for it: ServedEngine.check_options)."""

    vllm_python: str | None = None  # vLLM's Python
    llamacpp: str | None = None  # llama.cpp's build
    threads: int | None = None
    server_args: tuple[str, ...] = ()  # extra server flags
    target_gguf: str | None = None  # a GGUF target to serve beside the converted one
    server_log: str | None = None  # the log of a server at --url


@dataclass(frozen=True)
class ServedAnswer:
    """One completion's numbers as an engine reported them: its per-step accepted counts (bonus not
    included), the accept length they give (mean of a + 1), the engine's own accept length where it says
    one, the tokens it answered and its verify steps."""

    per_step: list[int]
    accept_length: float | None
    token_ids: list[int] | None
    verify_steps: int | None = None
    engine_accept_length: float | None = None


class Client(Protocol):
    served_model: str | None  # what the server says it serves (named in the result)

    def ask(
        self,
        number: int,
        prompt: list[int],
        max_new_tokens: int,
        num_steps: int,
        sampling: dict | None = None,
    ) -> tuple[dict, ServedAnswer]:
        """(the request and response as exchanged, kept in responses.jsonl; the answer's numbers);
        `sampling`: temperature, top_p, top_k and seed of a sampled request (None: greedy)."""
        ...


@dataclass(frozen=True)
class ServedEngine:
    """One engine beside the replay: what it is called, which replay readings it runs, and how to launch it,
    connect to it and tell what is missing to run it here."""

    name: str  # "vllm"
    title: str  # "vLLM"
    readings: dict[str, str]  # the readings of a draft it runs (the replay emulates one), described
    default_url: str  # where a server of this engine listens by default
    own_options: tuple[str, ...]  # the ServerOptions fields this engine reads
    log_at_url: str | None  # what a server at a URL needs beside its URL (llama.cpp: its log), else None
    serves_gguf_targets: bool  # whether a quantized GGUF target can be served beside the full one
    missing: Callable[[ServerOptions], str | None]  # why it cannot be launched here (None: it can)
    launch: Callable[..., AbstractContextManager]  # (target, draft, K, log, options, context, progress)
    connect: Callable[[str, Path | None, float], Client]  # (url, its log, timeout)

    def check_options(self, options: ServerOptions, flag_names: dict[str, str]) -> None:
        """BadInput naming the first option given that this engine does not read (`flag_names`: each
        option's flag, as the caller spells it)."""
        for option in fields(ServerOptions):
            if option.name in self.own_options or option.name not in flag_names:
                continue
            if getattr(options, option.name) not in (None, (), ""):
                owners = [e.name for e in served_engines() if option.name in e.own_options]
                raise BadInput(
                    f"{flag_names[option.name]} goes with --engine {' / '.join(owners)} (not read by {self.title})"
                )


def served_engine(name: str) -> ServedEngine:
    if name not in ENGINE_MODULES:
        raise BadInput(f"no engine {name!r} runs beside the replay: use {' / '.join(ENGINE_MODULES)}")
    return importlib.import_module(ENGINE_MODULES[name]).ENGINE


def served_engines() -> list[ServedEngine]:
    return [served_engine(name) for name in ENGINE_MODULES]


def served_readings() -> tuple[str, ...]:
    """Every reading an engine beside the replay runs (--engine values serve-check can launch)."""
    return tuple(reading for engine in served_engines() for reading in engine.readings)


def engine_for(reading: str) -> ServedEngine:
    """The engine that runs this reading of a draft."""
    for engine in served_engines():
        if reading in engine.readings:
            return engine
    raise BadInput(
        f"no engine runs beside the replay for the reading {reading!r}: use --engine "
        + " / ".join(served_readings())
    )


def refusal_of(check: Callable[[ServerOptions], object]) -> Callable[[ServerOptions], str | None]:
    """An engine's `missing`: what `check` (which raises BadInput when the engine cannot run here) says,
    None when it passes."""

    def missing(options: ServerOptions) -> str | None:
        try:
            check(options)
        except BadInput as error:
            return str(error)
        return None

    return missing
