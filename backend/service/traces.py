"""Traces kept beside the database: captured once per (target files, prompt, budget) and read back by
every draft, wiring and K that replays over them; a wiring that needs a layer a kept trace lacks
captures it again with both sets of layers.

A trace file is `<artifacts>/traces/<key>.safetensors`: its tensors (the states per HF index, the top
ids and log-probabilities, entropies, near-ties) and, in the header's metadata, the prompt, the
continuation, the budget, where the target ran and the identity of the target's files (`target_identity`:
the config and tokenizer files' contents, each weights file's name, size and modification time). A
trace whose target files changed since it was captured is refused, never replayed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from backend import BadInput, first_line
from backend.target.trace import MARGIN, Trace, tokens_read

DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
CONTENT = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
WEIGHTS = ("*.safetensors", "*.bin", "*.gguf")


def target_identity(target_dir: str | Path) -> str:
    """What a trace's target files are: a digest of its config and tokenizer files' bytes and of each
    weights file's name, size and modification time (weights are not read: they may be terabytes)."""
    folder, digest = Path(target_dir), hashlib.sha256()
    for name in CONTENT:
        path = folder / name
        digest.update(name.encode() + (path.read_bytes() if path.is_file() else b"-"))
    for pattern in WEIGHTS:
        for path in sorted(folder.glob(pattern)):
            info = path.stat()
            digest.update(f"{path.name}:{info.st_size}:{info.st_mtime_ns}".encode())
    return digest.hexdigest()[:24]


def trace_key(identity: str, prompt_ids, budget: int, source: str = "local") -> str:
    """A trace's name: the target's identity, the prompt, the budget and who computes it (a vLLM trace is
    vLLM's own arithmetic: replayed against vLLM's serving, it must be vLLM's)."""
    text = json.dumps([identity, list(prompt_ids), budget] + ([] if source == "local" else [source]))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def trace_dir(artifact_dir: Path) -> Path:
    return Path(artifact_dir) / "traces"


def save_trace(folder: Path, key: str, trace: Trace, identity: str, target_dir: str) -> Path:
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {f"states.{i}": s.contiguous() for i, s in trace.states.items()}
    tensors |= {
        "top_ids": trace.top_ids.contiguous(),
        "top_logprobs": trace.top_logprobs.contiguous(),
        "entropies": trace.entropies.contiguous(),
        "near_tie": trace.near_tie.to(torch.uint8).contiguous(),
    }
    meta = {
        "prompt_ids": json.dumps(trace.prompt_ids),
        "continuation": json.dumps(trace.continuation),
        "budget": str(trace.budget),
        "source": trace.source,
        "target": str(target_dir),
        "target_identity": identity,
        "margin": str(MARGIN),
    }
    path = folder / f"{key}.safetensors"
    partial = path.with_suffix(".part")
    save_file(tensors, str(partial), metadata=meta)
    partial.replace(path)  # a trace file is whole or absent
    return path


def load_trace(path: Path, identity: str) -> Trace:
    """The trace in `path`; BadInput (naming the file) when it is not one or its target files changed."""
    import torch
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as opened:
            meta = opened.metadata() or {}
            tensors = {name: opened.get_tensor(name) for name in opened.keys()}
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:
        raise BadInput(f"{path}: not a trace file ({first_line(error)})") from None
    if meta.get("target_identity") != identity:
        raise BadInput(
            f"{path}: captured from the target in {meta.get('target', '?')} as its files were then; they "
            "changed since (config, tokenizer or weights): capture the trace again"
        )
    try:
        return Trace(
            json.loads(meta["prompt_ids"]),
            json.loads(meta["continuation"]),
            {int(n.split(".", 1)[1]): t for n, t in tensors.items() if n.startswith("states.")},
            tensors["top_ids"],
            tensors["top_logprobs"],
            tensors["entropies"],
            tensors["near_tie"].to(torch.bool),
            int(meta["budget"]),
            meta.get("source", "?"),
        )
    except (KeyError, ValueError) as error:
        raise BadInput(f"{path}: not a trace file (missing {error})") from None


def load_pair(request, progress):
    """(target, draft, preflight report) for `request`: the pair loaded here (`--via step`), or the
    draft beside a trace runner that holds no trace yet (`--via trace`: `fill` adds the plans')."""
    from backend.service import models

    progress(0.0, "loading models")
    if request.via != "trace":
        return models.pair(
            request.target,
            request.draft,
            request.device,
            request.dtype,
            request.device_map,
            request.max_memory,
        )
    import torch

    from backend.engine.draft_side import draft_side_target
    from backend.engine.loading import read_target_config
    from backend.target.trace import TraceRunner

    vocab = read_target_config(request.target).vocab_size
    runner = TraceRunner([], vocab, torch.device("cpu"))
    target = draft_side_target(request.target, runner, request.device, request.dtype)
    runner._device = target.device
    draft, report = models.draft(target, request.draft)
    return target, draft, report


def prepare(requests: list, db_url: str | None, progress, every_layer: bool = False) -> None:
    """The traces of `requests` (one prompt each, the same pair and settings) captured now and kept,
    in one go (one vLLM launched for all, or one batched decode here), so that each replay over them
    later reads them back; `every_layer`: every HF index (a check that tries other wirings after)."""
    from backend.service.checkpoints import checked_override
    from backend.service.database import open_database
    from backend.service.plan import resolve

    first = requests[0]
    override = checked_override(first.target, first.aux_hf_indices)
    target, draft, report = load_pair(first, progress)
    plans = [resolve(request, target, draft, report, override) for request in requests]
    fill(target, plans, open_database(db_url), progress, every_layer)


def fill(target, plans, database, progress, every_layer: bool = False) -> None:
    """Give `target`'s trace runner the trace of every plan's prompt: read from the traces kept beside
    the database, else captured now (by the target loaded here, all missing prompts decoding together,
    each verifying its guess: trace_guesses.py; or by vLLM: service/vllm_trace.py) and kept as each
    arrives. Nothing to do for a target that runs here."""

    runner = target.runner
    if getattr(runner, "name", None) != "trace":
        return
    identity, folder = target_identity(target.path), trace_dir(database.artifact_dir)
    budget = max(p.config.max_new_tokens for p in plans)
    indices = {i for p in plans for i in p.wiring.aux_hf_indices}
    if every_layer:
        indices |= set(range(target.num_layers + 1))
    prompts = list(dict.fromkeys(tuple(p.prompt_ids) for p in plans))
    stops = {prompt: set() for prompt in prompts}  # each prompt's replays' end-of-generation ids
    for plan in plans:
        stops[tuple(plan.prompt_ids)].add(stop_ids(plan, target))
    source = plans[0].request.trace_from
    keys = {prompt: trace_key(identity, prompt, budget, source) for prompt in prompts}
    found, missing, kept_guesses = [], [], {}
    for prompt, key in keys.items():
        path = folder / f"{key}.safetensors"
        kept = load_trace(path, identity) if path.is_file() else None
        if kept is not None and indices <= set(kept.states) and _covers(kept, budget, stops[prompt]):
            found.append(kept)
        else:  # none yet, without a layer this wiring reads, or cut before what a replay reads
            missing.append(prompt)
            if kept is not None:  # captured again with both sets of layers, its continuation the guess
                indices |= set(kept.states)
                kept_guesses[prompt] = kept.continuation
    if missing:

        def keep(trace: Trace) -> None:
            save_trace(folder, keys[tuple(trace.prompt_ids)], trace, identity, target.path)
            found.append(trace)

        from backend.service.trace_guesses import answers

        guesses = kept_guesses  # vLLM generates its own continuation: a guess is for the local capture only
        if source != "vllm":
            guesses = answers([p.request for p in plans], database, target.vocab_size) | kept_guesses
        asked = [(list(p), guesses.get(p), stops[p]) for p in missing]
        capture(target, plans[0].request, asked, budget, sorted(indices), folder, keep, progress)
    for plan, trace in ((p, t) for p in plans for t in found if tuple(t.prompt_ids) == tuple(p.prompt_ids)):
        trace.check_fits(
            plan.config.max_new_tokens,
            plan.config.num_steps,
            plan.wiring.aux_hf_indices,
            stop_ids(plan, target),
        )
    runner.add(found)


def stop_ids(plan, target) -> frozenset[int]:
    """The ids that end `plan`'s replay (its reading's, else the target's EOS ids: step_state.py)."""
    stops = plan.config.stop_ids
    return frozenset(target.eos_token_ids) if stops is None else frozenset(stops)


def _covers(trace: Trace, budget: int, stops) -> bool:
    return trace.budget >= budget and all(
        len(trace.continuation) >= tokens_read(trace.continuation, budget, s) for s in stops
    )


def capture(target, request, asked: list, budget: int, indices, folder: Path, keep, progress) -> None:
    """The traces of the `asked` prompts ((prompt, guess or None, the stop-id sets of its replays)),
    each handed to `keep` as it arrives: by vLLM (`--trace-from vllm`; it runs to budget + MARGIN and
    takes no guess), else by the target loaded here."""
    prompts = [prompt for prompt, _, _ in asked]
    if request.trace_from == "vllm":
        from backend.service.vllm_trace import vllm_traces

        progress(0.0, f"asking vLLM for {len(prompts)} traces")
        vllm_traces(request.trace_url, target.path, prompts, budget, indices, folder, keep, progress)
        return
    from backend.service import models
    from backend.target.trace_capture import capture_traces

    guessed = sum(1 for _, guess, _ in asked if guess)
    progress(
        0.0,
        f"capturing {len(prompts)} traces with the target loaded here"
        + (f" ({guessed} verifying the sample's answer or a kept continuation)" if guessed else ""),
    )
    dtype = str(target.dtype).removeprefix("torch.")
    local = models.target(target.path, str(target.device), DTYPE_NAMES[dtype])
    guesses, stops = [g for _, g, _ in asked], [s for _, _, s in asked]
    for trace in capture_traces(local, prompts, budget, indices, guesses, stops):
        keep(trace)
