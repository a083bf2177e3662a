"""The user's engine's accept length, from whatever it wrote, for a diagnosis that starts from it: an
SGLang server log (its decode lines), a vLLM /metrics scrape, or a file of per-request responses (vLLM,
SGLang, TensorRT-LLM, llama.cpp's `timings`, ModelOpt's profile; backend/data/per_request.py). Each is
read by the reader `observe` uses for it; this module only tells which one a text is (the data layer: Diagnose
reads it beside its replays)."""

from __future__ import annotations

from dataclasses import dataclass

from backend import BadInput
from backend.plain import Plain

VLLM_METRIC = "vllm:spec_decode"
SGLANG_DECODE = "Decode batch"


@dataclass(frozen=True)
class ServedAcceptance(Plain):
    """What the server said of its acceptance: its accept length (the definition it follows), the K it
    ran where it says one, which engine and file said it."""

    engine: str
    source: str
    accept_length: float
    num_steps: int | None
    definition: str
    counted: str  # what the number pools ("12 decode-batch lines", "8 requests, 412 verify steps")


def read_served(text: str, name: str, num_steps: int | None = None) -> ServedAcceptance:
    """The accept length in `text` (named `name` in every message); `num_steps`: K where the text does
    not say it (vLLM V0 metrics, llama.cpp timings). BadInput naming `name` when the text holds none."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        from backend.data.per_request import read_requests

        parsed = read_requests(text, name, "auto", num_steps)
        pooled = parsed.pooled
        if pooled.accept_length is None:
            raise BadInput(f"{name}: its {parsed.format} responses carry no verify step (nothing drafted)")
        return ServedAcceptance(
            parsed.format,
            name,
            pooled.accept_length,
            pooled.num_speculative_tokens or num_steps,
            pooled.definitions.pooled_accept_length,
            f"{pooled.with_accept_length} requests, {pooled.verify_steps} verify steps",
        )
    if VLLM_METRIC in text:
        from backend.data.serving import parse_vllm_metrics

        observation = parse_vllm_metrics([(text, name)], num_steps)
        counted = f"{observation.samples} verify steps (totals since the server started)"
    elif SGLANG_DECODE in text:
        from backend.data.serving import parse_sglang_log

        observation = parse_sglang_log(text, name)
        counted = f"{observation.samples} decode-batch lines"
    else:
        raise BadInput(
            f"{name}: neither per-request responses (JSON), a vLLM /metrics scrape ({VLLM_METRIC}_* series) "
            f"nor an SGLang log ('{SGLANG_DECODE}' lines)"
        )
    if observation.accept_length is None:
        raise BadInput(f"{name}: {observation.engine} reported no accept length in it")
    settings = observation.settings
    k = settings.get("speculative_num_steps") or settings.get("num_speculative_tokens") or num_steps
    return ServedAcceptance(
        observation.engine,
        name,
        observation.accept_length,
        int(k) if k else None,
        observation.definition,
        counted,
    )
