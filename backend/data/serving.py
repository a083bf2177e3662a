"""What a serving engine itself reports about speculative decoding, read from its own outputs.

- SGLang server logs: the decode-batch lines (`accept len`, `gen throughput`) and the start-up
  `server_args=ServerArgs(...)` dump, which SGLang prints after its own rewrites of the
  speculative flags (python/sglang/srt/managers/scheduler.py log of decode stats; server_args.py).
- vLLM Prometheus metrics (`/metrics` text or a saved scrape): V1 counters
  `vllm:spec_decode_num_drafts`, `..._num_draft_tokens`, `..._num_accepted_tokens`,
  `..._num_accepted_tokens_per_pos{position}` (vllm/v1/spec_decode/metrics.py SpecDecodingProm), and
  the V0 counters (`..._num_emitted_tokens`, gauges `..._draft_acceptance_rate`, `..._efficiency`).
  Two scrapes subtract, giving a window.
Formats and versions: docs/reference.md §11. Garbage or a file with nothing to read is BadInput.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from backend import BadInput
from backend.plain import Plain
from backend.run.metrics import definitions

DEFINITIONS = definitions(  # by where the server's number was read, from the one DEFINITIONS
    {
        "sglang": "sglang_log_accept_length",
        "vllm": "vllm_metrics_accept_length",
        "vllm-v0": "vllm_v0_metrics_accept_length",
    }
)


@dataclass(frozen=True)
class ServingObservation(Plain):
    engine: str  # sglang | vllm
    source: str
    accept_length: float | None
    definition: str
    per_position: list[float] | None = None
    throughput: float | None = None  # generated tokens/s, as the engine logged it
    settings: dict = field(default_factory=dict)  # speculative settings found (effective, after rewrites)
    rewrites: list[str] = field(default_factory=list)  # the engine's own notices of rewritten flags
    version: str | None = None
    window: dict = field(default_factory=dict)  # first/last timestamp or the scrapes subtracted
    samples: int = 0  # decode-log lines, or drafts (verify steps) counted
    acceptance_rate: float | None = None


# ------------------------------------------------------------------------------------ SGLang

# 0.4.3: "Decode batch. ... accept len: 1.90, gen throughput (token/s): 56.80, #queue-req: 0";
# 0.4.6: adds "cuda graph"; 0.5.4: "Decode batch [N]," and "accept rate"; 0.5.5+: "Decode batch,".
DECODE = re.compile(
    r"Decode batch(?: \[\d+\])?[.,] .*?accept len: (?P<al>[0-9.]+)(?:, accept rate: (?P<rate>[0-9.]+))?"
)
THROUGHPUT = re.compile(r"gen throughput \(token/s\): (?P<tps>[0-9.]+)")
STAMP = re.compile(r"^\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
# entrypoints/engine.py _launch_subprocesses: logger.info(f"{server_args=}") after __post_init__'s
# rewrites; a dataclass repr up to 0.5.22 ("key=value"), a dict from 0.5.23 ("'key': value").
SERVER_ARGS = re.compile(r"server_args=(?:ServerArgs\((?P<body>.*)\)|(?P<dict>\{.*\}))\s*$")
FIELD = re.compile(r"(?P<key>[a-z_]+)=(?P<value>'(?:[^'\\]|\\.)*'|None|True|False|-?[0-9.e+-]+)")
DICT_FIELD = re.compile(r"'(?P<key>[a-z_]+)': (?P<value>'(?:[^'\\]|\\.)*'|None|True|False|-?[0-9.e+-]+)")
SPEC_KEYS = (
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_token_map",
)
OTHER_KEYS = ("model_path", "context_length", "max_running_requests", "enable_mixed_chunk", "dtype")


def _value(text: str):
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    if text.startswith("'"):
        return text[1:-1]
    number = float(text)
    return int(number) if number.is_integer() and "." not in text and "e" not in text else number


def parse_sglang_log(text: str, source: str) -> ServingObservation:
    lengths, rates, speeds, stamps, settings, rewrites = [], [], [], [], {}, []
    for line in text.splitlines():
        decode = DECODE.search(line)
        if decode:
            lengths.append(float(decode["al"]))
            if decode["rate"]:
                rates.append(float(decode["rate"]))
            speed = THROUGHPUT.search(line)
            if speed:
                speeds.append(float(speed["tps"]))
            stamp = STAMP.search(line)
            if stamp:
                stamps.append(stamp["time"])
            continue
        dump = SERVER_ARGS.search(line)
        if dump:
            pattern, body = (FIELD, dump["body"]) if dump["body"] is not None else (DICT_FIELD, dump["dict"])
            found = {m["key"]: _value(m["value"]) for m in pattern.finditer(body)}
            settings = {k: found[k] for k in (*SPEC_KEYS, *OTHER_KEYS) if k in found}
        elif "speculative" in line and ("adjusted" in line or "is set to" in line or "reset" in line.lower()):
            rewrites.append(line.strip()[:300])
    if not lengths:
        what = (
            "a server_args dump but no decode-batch line with `accept len`" if settings else "no SGLang line"
        )
        raise BadInput(f"{source}: {what} (is speculative decoding on, and is this an SGLang server log?)")
    return ServingObservation(
        engine="sglang",
        source=source,
        accept_length=sum(lengths) / len(lengths),
        definition=DEFINITIONS["sglang"],
        throughput=sum(speeds) / len(speeds) if speeds else None,
        settings=settings,
        rewrites=rewrites,
        window={"first": stamps[0], "last": stamps[-1]} if stamps else {},
        samples=len(lengths),
        acceptance_rate=sum(rates) / len(rates) if rates else None,
    )


# -------------------------------------------------------------------------------------- vLLM

SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>[-+0-9.eEinfNa]+)"
)
LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


def read_metrics(text: str, source: str) -> dict:
    """{(metric name without _total, position or None): summed value} of the speculative series."""
    series: dict = {}
    spec_lines = 0
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        sample = SAMPLE.match(line.strip())
        if sample is None:
            raise BadInput(f"{source}: not a Prometheus exposition (line {line[:80]!r})")
        name = sample["name"]
        if not name.startswith("vllm:spec_decode") or name.endswith(
            ("_created", "_bucket", "_sum", "_count")
        ):
            continue
        labels = {m["key"]: m["value"] for m in LABEL.finditer(sample["labels"] or "")}
        try:
            value = float(sample["value"])
        except ValueError as error:
            raise BadInput(f"{source}: {name} has no numeric value") from error
        if not value >= 0 or value == float("inf"):  # NaN fails >= too
            raise BadInput(f"{source}: {name} is {sample['value']}: a counter is finite and >= 0")
        key = (name.removesuffix("_total"), labels.get("position"))
        series[key] = series.get(key, 0.0) + value  # one series per engine/model label set: summed
        spec_lines += 1
    if not spec_lines:
        raise BadInput(
            f"{source}: no vllm:spec_decode_* metric (is speculative decoding on, is this vLLM's /metrics?)"
        )
    return series


def parse_vllm_metrics(
    scrapes: list[tuple[str, str]], num_speculative_tokens: int | None = None
) -> ServingObservation:
    """One scrape (totals since start) or two (the later minus the earlier: a window)."""
    after = read_metrics(*scrapes[-1])
    before = read_metrics(*scrapes[0]) if len(scrapes) > 1 else {}
    delta = {key: value - before.get(key, 0.0) for key, value in after.items()}
    if any(value < 0 for value in delta.values()):
        raise BadInput(
            f"{scrapes[0][1]} is not an earlier scrape of {scrapes[-1][1]}: counters went down (restart?)"
        )
    source = " - ".join(s for _, s in reversed(scrapes)) if len(scrapes) > 1 else scrapes[0][1]
    window = {"scrapes": [s for _, s in scrapes]}
    drafts = delta.get(("vllm:spec_decode_num_drafts", None))
    accepted = delta.get(("vllm:spec_decode_num_accepted_tokens", None))
    draft_tokens = delta.get(("vllm:spec_decode_num_draft_tokens", None))
    rate = accepted / draft_tokens if accepted is not None and draft_tokens else None
    if drafts:  # V1
        positions = sorted(
            int(p) for (name, p) in delta if name.endswith("accepted_tokens_per_pos") and p is not None
        )
        per_position = [
            delta[("vllm:spec_decode_num_accepted_tokens_per_pos", str(p))] / drafts for p in positions
        ]
        settings = {"num_speculative_tokens": round(draft_tokens / drafts)} if draft_tokens else {}
        return ServingObservation(
            "vllm",
            source,
            1 + (accepted or 0.0) / drafts,
            DEFINITIONS["vllm"],
            per_position or None,
            settings=settings,
            version="V1 engine",
            window=window,
            samples=int(drafts),
            acceptance_rate=rate,
        )
    emitted = delta.get(("vllm:spec_decode_num_emitted_tokens", None))
    if emitted is None or draft_tokens is None:
        raise BadInput(
            f"{source}: vllm:spec_decode metrics without drafts or emitted tokens: cannot compute an accept length"
        )
    accept_length = None
    settings = {}
    if num_speculative_tokens:
        steps = draft_tokens / num_speculative_tokens
        accept_length = emitted / steps if steps else None
        settings = {"num_speculative_tokens": num_speculative_tokens}
    return ServingObservation(
        "vllm",
        source,
        accept_length,
        DEFINITIONS["vllm-v0"],
        settings=settings,
        version="V0 engine",
        window=window,
        samples=int(draft_tokens),
        acceptance_rate=rate,
    )
