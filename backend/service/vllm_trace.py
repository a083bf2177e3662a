"""Traces computed by a running vLLM (`--trace-from vllm`): vLLM serves the target with the
`extract_hidden_states` speculative method and a hidden-states KV connector, generates each prompt's
greedy continuation and writes the states of every position to a safetensors file whose path it answers;
only the draft then runs here. Whatever vLLM shards the target over (tensor or pipeline parallel, nodes),
SpecLens reads one file per prompt: the folder vLLM writes to must be one this machine reads (a shared
mount where vLLM runs elsewhere).

What it asks, per vLLM 0.32's source:
- the server: `--speculative-config {"method": "extract_hidden_states", "num_speculative_tokens": 1,
  "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [HF indices]}}}` (vLLM's aux
  id i is transformers' `hidden_states[i]`: 0 the embeddings; measured here to 7e-7 relative) and
  `--kv-transfer-config` naming a hidden-states connector with `shared_storage_path`: on a CPU build the
  one in backend/vllm_plugin (vLLM imports it by `kv_connector_module_path`; the stock
  `ExampleHiddenStatesConnector` needs CUDA), on a GPU vLLM's own;
- each request: `/v1/completions` on the prompt's ids, greedy, `ignore_eos`, `max_tokens` = budget + the
  trace margin, `logprobs` (the top log-probabilities of each generated position, `return_tokens_as_token_ids`
  so that they name ids), and `kv_transfer_params: {"include_output_tokens": true}` (the connector's
  `request_finished`: the states of the prompt and of every output token but the last); the answer's
  `kv_transfer_params.hidden_states_path` names the file ({"hidden_states": [T, ids, H], "token_ids": [T]}).

vLLM answers top log-probabilities only: a vLLM trace's entropies are those of the top `TOP` tokens with
the rest of the mass as one outcome (a lower bound), and its near-ties are read from the top two
log-probabilities (their gap is the logits' gap) against the top one's magnitude.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from backend import BadInput, first_line
from backend.run.metrics import NEAR_TIE
from backend.service.server_process import Launched, free_port, launched, post
from backend.service.vllm_server import LAUNCH_ENV, served_model, vllm_python
from backend.target.trace import MARGIN, TOP, Trace

PLUGIN = Path(__file__).resolve().parents[1] / "vllm_plugin"
CPU_CONNECTOR = {
    "kv_connector": "CpuHiddenStatesConnector",
    "kv_connector_module_path": "speclens_hidden_states",
}


def launch_command(
    python: Path, target: str, indices, storage: Path, port: int, max_model_len: int
) -> list[str]:
    speculative = {
        "method": "extract_hidden_states",
        "num_speculative_tokens": 1,
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": sorted(indices)}},
    }
    transfer = {
        **CPU_CONNECTOR,
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": str(storage)},
    }
    return [
        str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
        "--speculative-config", json.dumps(speculative), "--kv-transfer-config", json.dumps(transfer),
        "--dtype", "float32", "--enforce-eager", "--max-model-len", str(max_model_len),
        "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip


@contextmanager
def launched_trace_server(
    target: str, indices, storage: Path, log_path: Path, max_model_len: int = 2048, progress=None
) -> Iterator[Launched]:
    """vLLM's CPU build serving `target` with the hidden-states method at HF `indices`, writing to
    `storage`, until the block ends."""
    command = launch_command(vllm_python(), target, indices, storage, port := free_port(), max_model_len)
    env = {
        **LAUNCH_ENV,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGIN), os.environ.get("PYTHONPATH")])),
    }
    with launched("vLLM", command, f"http://127.0.0.1:{port}", log_path, env, 900.0, progress) as server:
        yield server


def vllm_trace(
    url: str, model: str, prompt_ids: list[int], budget: int, indices, timeout: float = 900.0
) -> Trace:
    """The trace of one prompt from vLLM at `url` (serving with the hidden-states method at HF `indices`,
    in that order). BadInput naming the URL and the prompt when vLLM runs another method, answers no path,
    or writes a file this machine cannot read."""
    body = {
        "model": model,
        "prompt": list(prompt_ids),
        "max_tokens": budget + MARGIN,
        "temperature": 0.0,
        "ignore_eos": True,
        "logprobs": TOP,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "kv_transfer_params": {"include_output_tokens": True},
    }
    said = f"vLLM at {url}, prompt {list(prompt_ids[:6])}{'...' if len(prompt_ids) > 6 else ''}"
    answer = post(url, "/v1/completions", body, timeout, "vLLM")
    path = (answer.get("kv_transfer_params") or {}).get("hidden_states_path")
    if not path:
        raise BadInput(
            f"{said}: answered no hidden_states_path: serve it with the extract_hidden_states method and a "
            "hidden-states connector (docs/traces.md)"
        )
    choice = (answer.get("choices") or [{}])[0]
    output = choice.get("token_ids") or []
    states = _read_states(Path(path), said)
    expected = list(prompt_ids) + list(output[:-1])
    if states["token_ids"].tolist() != expected:
        raise BadInput(f"{said}: {path} holds the states of other tokens than the prompt and its answer")
    hidden = states["hidden_states"].float()
    if hidden.shape[1] != len(indices):
        raise BadInput(f"{said}: {path} holds {hidden.shape[1]} states per token; asked HF {sorted(indices)}")
    top_ids, top_logprobs = _top(choice.get("logprobs") or {}, len(output), said)
    rows = len(prompt_ids) - 1
    return Trace(
        list(prompt_ids),
        list(output),
        {i: hidden[:, j].contiguous() for j, i in enumerate(sorted(indices))},
        torch.cat([torch.full((rows, TOP), -1, dtype=torch.long), top_ids]),
        torch.cat([torch.full((rows, TOP), -math.inf), top_logprobs]),
        torch.cat([torch.full((rows,), math.nan), _entropy_lower_bound(top_logprobs)]),
        torch.cat([torch.zeros(rows, dtype=torch.bool), _near_tie(top_logprobs)]),
        budget,
        f"vLLM at {url}",
    )


def _written(path: Path, timeout: float = 120.0) -> None:
    """Wait until vLLM's connector has written `path`: it holds an exclusive lock on `path`.lock from
    before it answers until the file is whole (the stock connector's load_hidden_states waits the same
    way), and the answer may come first."""
    import fcntl

    lock, waited = Path(f"{path}.lock"), 0.0
    while waited < timeout:
        if waited > 10 and not lock.is_file():  # no lock file here: the path is on another machine
            return
        if lock.is_file():
            with lock.open() as held:
                try:
                    fcntl.flock(held, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    return
                except BlockingIOError:
                    pass
        elif path.is_file():
            return
        time.sleep(0.05)
        waited += 0.05


def _read_states(path: Path, said: str) -> dict:
    from safetensors.torch import load_file

    _written(path)
    if not path.is_file():
        raise BadInput(
            f"{said}: wrote {path}, which this machine cannot read: vLLM's shared_storage_path must be a "
            "folder both machines mount"
        )
    try:
        return load_file(str(path))
    except (OSError, ValueError, RuntimeError) as error:
        raise BadInput(f"{said}: {path}: not vLLM's hidden states ({first_line(error)})") from None


def _top(logprobs: dict, count: int, said: str) -> tuple[torch.Tensor, torch.Tensor]:
    """[count, TOP] ids and log-probabilities, most likely first, from vLLM's `top_logprobs`."""
    rows = logprobs.get("top_logprobs") or []
    if len(rows) != count:
        raise BadInput(f"{said}: answered {len(rows)} rows of top log-probabilities for {count} tokens")
    ids, values = torch.full((count, TOP), -1, dtype=torch.long), torch.full((count, TOP), -math.inf)
    for r, row in enumerate(rows):
        ranked = sorted(((v, int(k.removeprefix("token_id:"))) for k, v in (row or {}).items()), reverse=True)
        for c, (value, token) in enumerate(ranked[:TOP]):
            ids[r, c], values[r, c] = token, value
    return ids, values


def _entropy_lower_bound(top_logprobs: torch.Tensor) -> torch.Tensor:
    probs = top_logprobs.exp()
    rest = (1 - probs.sum(-1)).clamp_min(0)
    return -(probs * top_logprobs.clamp_min(-1e30)).nan_to_num().sum(-1) - rest * rest.clamp_min(1e-30).log()


def _near_tie(top_logprobs: torch.Tensor) -> torch.Tensor:
    gap = top_logprobs[:, 0] - top_logprobs[:, 1]
    return gap <= NEAR_TIE * top_logprobs[:, 0].abs().clamp_min(1.0)


def vllm_traces(
    url: str | None,
    target: str,
    prompts: list[list[int]],
    budget: int,
    indices,
    log_dir: Path,
    save,
    progress,
) -> None:
    """Each prompt's trace from vLLM at `url`, or from a vLLM launched here on `target` (--launch), each
    handed to `save` as it arrives (what arrived is kept if a later prompt fails)."""

    def ask(at: str) -> None:
        model = served_model(at)
        for number, prompt in enumerate(prompts):
            progress(number / len(prompts), f"vLLM trace {number + 1}/{len(prompts)}")
            save(vllm_trace(at, model, prompt, budget, indices))

    if url:
        ask(url)
        return
    storage = log_dir / "vllm-states"
    with launched_trace_server(
        target, indices, storage, log_dir / "vllm-trace.log", progress=progress
    ) as server:
        ask(server.url)
