"""A serving engine's process on loopback, whatever the engine: started in its own process group with
its log in a file, waited on until its /health answers, stopped (the whole group) on every exit path;
and the one way SpecLens posts to a server's HTTP API. vllm_server.py and llamacpp_server.py say what
to start and how to ask it."""

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

MAX_ANSWER_BYTES = 16 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Launched:
    url: str
    log_path: Path
    command: list[str]
    seconds_to_ready: float = 0.0
    process: subprocess.Popen | None = None

    def reason(self) -> str:
        """Why the server failed, from its log (the first exception line)."""
        return why_it_died(self.log_path)

    def log_lines(self, pattern: str) -> list[str]:
        """Lines of the server's log that contain `pattern` (e.g. vLLM's "auxiliary layers" line)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line.strip() for line in text.splitlines() if pattern in line]

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None


def why_it_died(log_path: Path) -> str:
    """The line of the server's log that names the root cause: its first exception line (vLLM logs the
    worker's error before the EngineDeadError that follows it; llama.cpp's errors say "error" or
    "failed"), else its last line."""
    try:
        lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    causes = [
        ln
        for ln in lines
        if (re.search(r"\b\w*(Error|Exception): ", ln) or re.search(r"\b(error|failed|GGML_ASSERT)\b", ln))
        and " WARNING " not in ln
        and "EngineDeadError" not in ln
    ]
    if causes:
        return re.sub(r"^\(.*?\) ERROR [\d-]+ [\d:]+ \[[^]]*\] ", "", causes[0])[-300:]
    return lines[-1][-300:] if lines else "an empty log"


@contextmanager
def launched(
    name: str,
    command: list[str],
    url: str,
    log_path: Path,
    env: dict[str, str],
    startup_timeout: float,
    progress=None,
) -> Iterator[Launched]:
    """`command` (an engine called `name`, answering at `url`) running until the block ends; stopped
    (its whole process group) on every exit path, an exception or Ctrl-C included."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_path.open("w") as log:
        process = subprocess.Popen(  # our own command line, no shell
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            start_new_session=True,
            preexec_fn=_die_with_parent,  # one prctl call, no Python state touched
        )
    server = Launched(url, log_path, command, process=process)
    try:
        while not healthy(url):
            if process.poll() is not None:
                raise BadInput(
                    f"{name} ({command[0]}) stopped before serving (exit {process.returncode}): "
                    f"{why_it_died(log_path)} (log: {log_path})"
                )
            waited = time.monotonic() - started
            if waited > startup_timeout:
                raise BadInput(
                    f"{name} did not answer {url}/health within {startup_timeout:.0f} s (log: {log_path})"
                )
            if progress:
                progress(min(0.9, waited / 120), f"starting {name} ({waited:.0f} s)")
            time.sleep(0.5 if waited < 10 else 2.0)
        server.seconds_to_ready = time.monotonic() - started
        yield server
    finally:
        stop(process)


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the launching process dies (a dashboard worker killed
    mid-check must not leave a server running on its own)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the finally of launched is the only stop


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as response:  # loopback
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the whole process group, SIGKILL if it lingers; the group too when its leader has
    exited already (vLLM's engine processes outlive a dead API server)."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        if not _group_alive(process.pid):
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def post(url: str, path: str, body: dict | None, timeout: float, name: str = "the server") -> dict:
    """One request to `name` at `url` (GET without a body); its JSON object answer. BadInput naming the
    URL and what went wrong: an HTTP error, no answer in time, a dropped connection, or an answer that
    is not a JSON object (not this engine's API)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url.rstrip("/") + path, data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # the user's URL
            raw = response.read(MAX_ANSWER_BYTES)
    except urllib.error.HTTPError as error:
        detail = error.read(2000).decode(errors="replace").strip().splitlines()
        raise BadInput(
            f"{name}: {url}{path}: HTTP {error.code} ({detail[-1][:300] if detail else error.reason})"
        ) from None
    except TimeoutError:
        raise BadInput(f"{name}: {url}{path}: no answer within {timeout:g} s (raise --timeout)") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise BadInput(f"{name}: {url}{path}: the request failed ({error})") from None
    try:
        answer = json.loads(raw)
    except ValueError:
        raise BadInput(f"{name}: {url}{path}: the answer is not JSON (is this {name}'s API?)") from None
    if not isinstance(answer, dict):
        raise BadInput(f"{name}: {url}{path}: the answer is not a JSON object (is this {name}'s API?)")
    return answer
