"""The engines SpecLens runs beside the replay, each as three things: how to launch it on the pair, how
to ask it for one greedy completion, and how to read its per-step accepted counts. engine_check.py
runs every engine through this one interface.

- vLLM (vllm_server.py): the OpenAI server; counts in the answer (metrics.speculative_decoding).
- llama.cpp (llamacpp_server.py): llama-server on GGUFs from its own converter; counts in its trace.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from backend import BadInput
from backend.data.per_request import Where, parse_one
from backend.service.server_process import Launched

SERVER_OF_READING = {"vllm": "vllm", "vllm-v2": "vllm", "llamacpp": "llamacpp"}
TITLES = {"vllm": "vLLM", "llamacpp": "llama.cpp"}


@dataclass(frozen=True)
class ServerOptions:
    """How to run the engine here: vLLM's Python; llama.cpp's build, threads, extra server flags, a
    GGUF target to serve instead of the converted one, and the log of a server at --url."""

    vllm_python: str | None = None
    llamacpp: str | None = None
    threads: int | None = None
    server_args: tuple[str, ...] = ()
    target_gguf: str | None = None
    server_log: str | None = None


def server_for(reading: str) -> str:
    if reading not in SERVER_OF_READING:
        raise BadInput(
            f"no engine runs beside the replay for the reading {reading!r}: use --engine "
            + " / ".join(SERVER_OF_READING)
        )
    return SERVER_OF_READING[reading]


class VllmClient:
    name = "vLLM"

    def __init__(self, url: str, log_path: Path | None, timeout: float):
        from backend.service.vllm_server import served_model

        self.url, self.timeout = url, timeout
        self.model = served_model(url, timeout)

    def ask(self, number: int, prompt: list[int], max_new_tokens: int, num_steps: int) -> tuple[dict, dict]:
        from backend.service.vllm_server import complete

        exchange = complete(self.url, self.model, prompt, max_new_tokens, self.timeout)
        numbers = parse_one(exchange, Where("vLLM", f"prompt {number}"), "vllm", num_steps)[0]
        if numbers.status != "ok" or numbers.per_step_accepted is None:
            raise BadInput(
                f"vLLM: prompt {number}: no per-step counts ({numbers.note or numbers.status}); launch the "
                "server with --per-request-spec-decode-metrics detailed"
            )
        choices = exchange["response"].get("choices") or [{}]
        served = {
            "per_step": numbers.per_step_accepted,
            "accept_length": numbers.accept_length,
            "engine_accept_length": numbers.engine_accept_length,
            "token_ids": choices[0].get("token_ids"),
            "verify_steps": numbers.verify_steps,
        }
        return exchange, served


class LlamacppClient:
    name = "llama.cpp"

    def __init__(self, url: str, log_path: Path | None, timeout: float):
        from backend.service.llamacpp_server import props

        if log_path is None:
            raise BadInput(
                "llama.cpp at --url: its per-step counts are in its log only; start llama-server with "
                "LLAMA_TRACE=1 and -np 1, its output in a file, and name the file with --server-log"
            )
        if not Path(log_path).is_file():
            raise BadInput(f"{log_path}: no such server log")
        self.url, self.log_path, self.timeout = url, Path(log_path), timeout
        self.props = props(url, timeout)

    def ask(self, number: int, prompt: list[int], max_new_tokens: int, num_steps: int) -> tuple[dict, dict]:
        from backend.service.llamacpp_server import complete, log_size, served_steps

        n_ctx = self.props.get("n_ctx")
        if n_ctx and len(prompt) + max_new_tokens + num_steps + 2 > n_ctx:
            # server_slot::get_n_draft_max also caps a draft at n_ctx - n_tokens - 2: not replayed
            raise BadInput(
                f"llama.cpp at {self.url}: its slot context is {n_ctx} tokens; prompt {number} ({len(prompt)}) + "
                f"{max_new_tokens} new + K {num_steps} + 2 passes it, where llama.cpp drafts fewer, which the "
                "replay does not model: start it with a larger -c or lower --max-new-tokens"
            )
        offset = log_size(self.log_path)
        exchange = complete(self.url, prompt, max_new_tokens, self.timeout)
        return exchange, served_steps(exchange, self.log_path, offset, number)


CLIENTS = {"vllm": VllmClient, "llamacpp": LlamacppClient}


@contextmanager
def launch(
    server: str,
    target: str,
    draft: str | None,
    num_steps: int,
    log_path: Path,
    options: ServerOptions,
    context: int,
    progress=None,
) -> Iterator[tuple[Launched, dict]]:
    """`server` on the pair on loopback until the block ends: (the server, what its launch said)."""
    if server == "vllm":
        from backend.service.vllm_server import launched_server

        with launched_server(
            target, draft, num_steps, log_path, python=options.vllm_python, progress=progress
        ) as up:
            yield up, {"aux_layers_line": next(iter(up.log_lines("auxiliary layers")), None)}
        return
    from backend.service.llamacpp_server import ServerFlags, converted, launched_server, llamacpp_dir

    tree = llamacpp_dir(options.llamacpp)
    if progress:
        progress(0.0, "converting the pair to GGUF (llama.cpp's converter, once per content)")
    target_gguf = Path(options.target_gguf) if options.target_gguf else converted(target, llamacpp=tree)[0]
    draft_gguf, layers_line = converted(draft, target, llamacpp=tree) if draft else (None, "")
    with launched_server(
        target_gguf,
        draft_gguf,
        num_steps,
        log_path,
        ServerFlags(context, options.threads, options.server_args),
        llamacpp=tree,
        progress=progress,
    ) as up:
        yield (
            up,
            {
                "converter_layers_line": layers_line or None,
                "target_gguf": str(target_gguf),
                "draft_gguf": str(draft_gguf) if draft_gguf else None,
            },
        )
