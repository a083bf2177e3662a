"""Per-request speculative-decoding numbers, read from what each serving engine returns.

One parser per engine format turns a response into `RequestNumbers`: verify steps, accepted drafts
(bonus excluded), drafted tokens and, where the engine gives it, the histogram of steps accepting
exactly a drafts. SpecLens's own metrics are then computed from those counts, never copied from an
engine's ratio (SGLang's `spec_accept_length` is not the accept length; TensorRT-LLM has none), with
the definition each was converted from. What cannot be a number is reported as what it is: a
request without a verify step, a response with n > 1 that the engine does not break down, a
cumulative average since the server started.

Formats (docs/reference.md §14 has the fields and the engines' source files), one reader module per
engine family:
vllm, sglang, sglext, trtllm, llamacpp, modelopt (pooled, not per request), sglang-server-info.
Plain Python: no torch, no database.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from backend import BadInput
from backend.data.formats_other import (
    parse_llamacpp,
    parse_modelopt,
    parse_trtllm,
    parse_vllm,
    prompt_of,
    response_id,
)
from backend.data.formats_sglang import parse_server_info, parse_sglang, parse_sglext
from backend.data.request_numbers import (
    Pooled,
    RequestNumbers,
    RequestsFile,
    Where,
    histogram_metrics,
)
from backend.run.metrics import mean_ci95

FORMATS = ("vllm", "sglang", "sglext", "trtllm", "llamacpp", "modelopt", "sglang-server-info")
# Readers: backend/data/formats_other.py (vllm, trtllm, llamacpp, modelopt) and formats_sglang.py
# (sglang, sglext, sglang-server-info); the counts and their metrics: request_numbers.py. This module
# reads a file, detects each record's format, dispatches it (RESPONSE_PARSERS) and pools the result.

# ---------------------------------------------------------------------------- file and pooling


def detect(record: dict) -> str | None:
    """The format a response is in, or None for a record that says nothing (a stream chunk)."""
    response = record.get("response") if isinstance(record.get("response"), dict) else record
    if isinstance(response.get("metrics"), dict) and "speculative_decoding" in response["metrics"]:
        return "vllm"
    if "sglext" in response:
        return "sglext"
    choices = response.get("choices") if isinstance(response.get("choices"), list) else []
    if "meta_info" in response or any(isinstance(c, dict) and "meta_info" in c for c in choices):
        return "sglang"
    if any(isinstance(c, dict) and "speculative_decoding" in c for c in choices):
        return "trtllm"
    if "timings" in response:
        return "llamacpp"
    if "acceptance_length_histogram" in response or "marginal_accept_rates" in response:
        return "modelopt"
    if "internal_states" in response:
        return "sglang-server-info"
    return None


def is_stream_chunk(record: dict) -> bool:
    response = record.get("response") if isinstance(record.get("response"), dict) else record
    if str(response.get("object", "")).endswith("chunk"):
        return True
    if response.get("stop") is False and "timings" not in response:  # llama.cpp's native stream
        return True
    choices = response.get("choices")
    return isinstance(choices, list) and any(
        isinstance(c, dict) and ("delta" in c or c.get("finish_reason", "") is None) for c in choices
    )


def records_of(text: str, source: str) -> tuple[list[tuple[str, object]], bool]:
    """(where, value) of each record, and whether the file is one JSON document (not JSONL).
    Server-sent-event lines ("data: {...}", "data: [DONE]") are read as JSONL."""
    stripped = text.strip()
    if not stripped:
        raise BadInput(f"{source}: the file is empty")
    if stripped[0] in "[{":
        try:
            doc = json.loads(stripped)
        except json.JSONDecodeError:
            doc = None
        except RecursionError:
            raise BadInput(f"{source}: JSON nested too deeply") from None
        if isinstance(doc, list):
            return [(f"record {i + 1}", value) for i, value in enumerate(doc)], True
        if isinstance(doc, dict):
            return [("the document", doc)], True
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line.startswith("data:"):
            line = line[5:].strip()
        if not line or line == "[DONE]" or line.startswith(":"):
            continue
        try:
            out.append((f"line {number}", json.loads(line)))
        except json.JSONDecodeError as error:
            raise BadInput(f"{source}: line {number}: not JSON ({error.msg})") from None
        except RecursionError:
            raise BadInput(f"{source}: line {number}: JSON nested too deeply") from None
    return out, False


def kinds_of(records: list[tuple[str, object]], source: str) -> list[str | None]:
    """The format each record says it is in (None: it says nothing)."""
    kinds = []
    for record, value in records:
        if isinstance(value, list):  # SGLang's native /generate answers a list for a batch or n > 1
            kinds.append("sglang")
        elif isinstance(value, dict):
            kinds.append(detect(value))
        else:
            Where(source, record).fail(f"a {type(value).__name__}, expected a response object")
    return kinds


def file_format(format: str, kinds: list[str | None], records: list[tuple[str, object]], source: str) -> str:
    """The format asked for, or the first a record says; a file none speaks for is bad input."""
    found = format if format != "auto" else next((k for k in kinds if k is not None), None)
    if found is not None:
        return found
    if records and all(isinstance(v, dict) and is_stream_chunk(v) for _, v in records):
        raise BadInput(f"{source}: only stream chunks without statistics (was include_usage on?)")
    if not records:  # e.g. only `data: [DONE]` or comment lines
        raise BadInput(f"{source}: no response in it")
    record, value = records[0]
    keys = (
        ", ".join(sorted(map(str, value))[:8])
        if isinstance(value, dict)
        else f"a JSON {type(value).__name__}"
    )
    Where(source, record).fail(
        f"no speculative-decoding statistics in a format SpecLens reads ({', '.join(FORMATS)}); top-level keys: {keys}"
    )


def read_modelopt_file(records: list[tuple[str, object]], source: str) -> RequestsFile:
    if len(records) != 1:
        raise BadInput(f"{source}: a speculation_profile.json is one JSON document")
    parsed, profile = parse_modelopt(records[0][1], Where(source, records[0][0]))
    # one pooled histogram, not requests: the per-request mean is the profile's own (ModelOpt's
    # Average_AL over requests), not the mean over this file's one "request"
    summary = replace(
        pooled(parsed),
        accept_length_per_request_mean=profile.mean_accept_length_per_request if profile else None,
        pooled_only=True,
    )
    return RequestsFile(source, "modelopt", parsed, summary, 0, profile=profile)


def parse_value(value: dict | list, where: Where, found: str, k: int | None) -> list[RequestNumbers]:
    """One record: a response, or SGLang's list of them (a batch or n > 1), one item each."""
    if not isinstance(value, list):
        return parse_one(value, where, found, k)
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            where.fail(f"item {i} is {type(item).__name__}, expected a response object")
        out.extend(parse_one(item, Where(where.source, f"{where.record}, item {i}"), found, k))
    return out


def last_of_each_stream(parsed: list[RequestNumbers]) -> list[RequestNumbers]:
    """SGLang's /generate streamed: every chunk carries the meta_info so far, under the same id; the last
    is the request's (tokenizer_manager.py builds meta_info for each output it sends)."""
    last = {r.request_id: i for i, r in enumerate(parsed) if r.request_id is not None}
    return [r for i, r in enumerate(parsed) if r.request_id is None or last[r.request_id] == i]


@dataclass
class Parsed:
    """What the records of a per-response file gave, before pooling."""

    requests: list[RequestNumbers] = field(default_factory=list)
    skipped: int = 0  # stream chunks without statistics
    server_reads: list[tuple[str, dict]] = field(default_factory=list)


def parse_records(
    records: list[tuple[str, object]],
    kinds: list[str | None],
    found: str,
    format: str,
    source: str,
    k: int | None,
) -> Parsed:
    """Every record in the file's format: one of another format is bad input, a stream chunk without
    statistics is skipped, one that says nothing is read in the format only where the format allows it."""
    out = Parsed()
    for (record, value), kind in zip(records, kinds, strict=True):
        where = Where(source, record)
        if kind is not None and kind != found:
            where.fail(f"is {kind}, but the file is {found}" + (" (--format)" if format != "auto" else ""))
        if kind is None and is_stream_chunk(value):
            out.skipped += 1
            continue
        if kind is None and found not in ("trtllm", "llamacpp", "sglext"):
            where.fail(
                f"no {found} statistics in this record (top-level keys: {', '.join(sorted(value)[:8])})"
            )
        if found == "sglang-server-info":
            out.server_reads.append((record, value))
        else:
            out.requests.extend(parse_value(value, where, found, k))
    return out


def read_requests(
    text: str, source: str, format: str = "auto", num_speculative_tokens: int | None = None
) -> RequestsFile:
    """Every response in the file, parsed in its engine's format (detected when `format` is auto:
    the first record that says which; a record that says nothing, e.g. TensorRT-LLM's response to a
    request that never drafted, is read in that format)."""
    if format not in ("auto", *FORMATS):
        raise BadInput(f"unknown format {format!r}; use auto or one of {', '.join(FORMATS)}")
    records, _ = records_of(text, source)
    kinds = kinds_of(records, source)
    found = file_format(format, kinds, records, source)
    if found == "modelopt":
        return read_modelopt_file(records, source)
    out = parse_records(records, kinds, found, format, source, num_speculative_tokens)
    parsed, skipped = out.requests, out.skipped
    if found == "sglang":
        parsed = last_of_each_stream(out.requests)
        skipped += len(out.requests) - len(parsed)
    window = None
    if out.server_reads:
        parsed, window = parse_server_info(out.server_reads, source)
    if not parsed:
        raise BadInput(f"{source}: no response in it")
    return RequestsFile(source, found, parsed, pooled(parsed), skipped, window=window)


# One parser a per-response format (docs/reference.md §14); modelopt and sglang-server-info are
# whole-file formats, read by read_modelopt_file and parse_server_info.
RESPONSE_PARSERS = {
    "vllm": lambda response, where, base, _k: parse_vllm(response, where, base),
    "sglang": parse_sglang,
    "sglext": parse_sglext,
    "trtllm": lambda response, where, base, _k: parse_trtllm(response, where, base),
    "llamacpp": parse_llamacpp,
}


def fill_completion_tokens(out: list[RequestNumbers], response: dict) -> None:
    """The OpenAI usage block says how long the answer was (a replay of it runs as long)."""
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    tokens = usage.get("completion_tokens")
    if len(out) == 1 and out[0].completion_tokens is None and isinstance(tokens, int) and tokens > 0:
        out[0].completion_tokens = tokens


def apply_user_k(out: list[RequestNumbers], where: Where, k: int | None) -> None:
    """A K the user gave fills in what the engine did not say, never overrides it."""
    if k is None:
        return
    for numbers in out:
        if numbers.num_speculative_tokens is None:
            numbers.num_speculative_tokens = k
            if numbers.accept_histogram is not None and numbers.status == "ok":
                numbers.per_position_marginal, numbers.per_position_conditional = histogram_metrics(
                    numbers.accept_histogram, k
                )
        elif numbers.num_speculative_tokens != k:
            where.fail(
                f"the engine says K = {numbers.num_speculative_tokens}, --num-speculative-tokens says {k}"
            )


def parse_one(value: dict, where: Where, kind: str, k: int | None) -> list[RequestNumbers]:
    response = value.get("response") if isinstance(value.get("response"), dict) else value
    parser = RESPONSE_PARSERS.get(kind)
    if parser is None:
        where.fail(f"{kind} is a whole-file format, not one response per line")
    prompt_ids, prompt_text, messages = prompt_of(value, response)
    base = {
        "record": where.record,
        "engine": kind,
        "request_id": response_id(response),
        "prompt_ids": prompt_ids,
        "prompt_text": prompt_text,
        "prompt_messages": messages,
    }
    out = parser(response, where, base, k)
    if not out:
        where.fail(f"no {kind} statistics in the response")
    fill_completion_tokens(out, response)
    apply_user_k(out, where, k)
    return out


def pooled(requests: list[RequestNumbers]) -> Pooled:
    """Step-weighted over every request with verify steps; the per-request mean beside it."""
    counted = [r for r in requests if r.status == "ok" and r.accept_length is not None]
    rated = [r for r in requests if r.status == "ok" and r.drafted_tokens]
    steps = sum(r.verify_steps or 0 for r in counted)
    accepted = sum(r.accepted_drafts or 0 for r in counted)
    drafted = sum(r.drafted_tokens for r in rated)
    histogram = None
    if counted and all(r.accept_histogram is not None for r in counted):
        histogram = [0] * max(len(r.accept_histogram) for r in counted)
        for r in counted:
            for a, c in enumerate(r.accept_histogram):
                histogram[a] += c
    ks = {r.num_speculative_tokens for r in counted if r.num_speculative_tokens is not None}
    k = ks.pop() if len(ks) == 1 else None
    marginal = conditional = None
    if histogram is not None:
        marginal, conditional = histogram_metrics(histogram, k)
    statuses: dict[str, int] = {}
    for r in requests:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    return Pooled(
        requests=len(requests),
        with_accept_length=len(counted),
        statuses=statuses,
        verify_steps=steps,
        accepted_drafts=accepted,
        drafted_tokens=drafted if rated else None,
        num_speculative_tokens=k,
        accept_length=1 + accepted / steps if steps else None,
        accept_length_per_request_mean=sum(r.accept_length for r in counted) / len(counted)
        if counted
        else None,
        accept_length_per_request_ci95=mean_ci95([r.accept_length for r in counted]),
        acceptance_rate=sum(r.accepted_drafts or 0 for r in rated) / drafted if drafted else None,
        per_position_marginal=marginal,
        per_position_conditional=conditional,
        accept_histogram=histogram,
    )
