"""Per-request speculative-decoding numbers, read from what each serving engine returns.

One parser per engine format turns a response into `RequestNumbers`: verify steps, accepted drafts
(bonus excluded), drafted tokens and, where the engine gives it, the histogram of steps accepting
exactly a drafts. SpecLens's own metrics are then computed from those counts, never copied from an
engine's ratio (SGLang's `spec_accept_length` is not the accept length; TensorRT-LLM has none), with
the definition each was converted from. What cannot be a number is reported as what it is: a
request without a verify step, a response with n > 1 that the engine does not break down, a
cumulative average since the server started.

Formats (docs/reference.md §14 has the fields and the engines' source files):
vllm, sglang, sglext, trtllm, llamacpp, modelopt (pooled, not per request), sglang-server-info.
Plain Python: no torch, no database.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

from backend import BadInput
from backend.engine.metrics import mean_ci95

FORMATS = ("vllm", "sglang", "sglext", "trtllm", "llamacpp", "modelopt", "sglang-server-info")
MEAN_TOLERANCE = 1e-3  # an engine's own ratio vs the one its counts give (ModelOpt rounds to 6 digits)

DEFINITIONS = {
    "accept_length": "accept length: mean over verify steps of a + 1 (a accepted drafts, bonus token "
    "included) = 1 + accepted drafts / verify steps",
    "pooled_accept_length": "pooled accept length: total (a + 1) over all verify steps of all requests / "
    "total verify steps (step-weighted; a long request weighs more)",
    "accept_length_per_request_mean": "mean over requests with a verify step of each request's accept "
    "length (a short request weighs as much as a long one)",
    "accept_length_per_request_ci95": "95% confidence interval of the per-request mean: mean +- t(0.975, "
    "n-1) x s / sqrt(n) over the requests (accept length varies about +-50% between prompts)",
    "acceptance_rate": "accepted drafts / drafted tokens",
    "per_position_marginal": "P(a >= i) over verify steps, i = 1..K",
    "per_position_conditional": "P(a >= i | a >= i-1), i = 1..K; null where no step reached i-1",
}

CONVERTED = {
    "vllm": "vLLM metrics.speculative_decoding: a from acceptance_histogram (index = accepted drafts, "
    "length K+1, bonus excluded); accept length = 1 + num_accepted_draft_tokens / num_spec_steps, which "
    "is vLLM's mean_acceptance_length (checked against it)",
    "sglang": "SGLang meta_info: verify steps = spec_verify_ct, accepted = spec_num_correct_drafts "
    "(histogram spec_correct_drafts_histogram, index = correct drafts); accept length = 1 + correct / "
    "verify steps. NOT spec_accept_length = completion_tokens / spec_verify_ct, which also counts the "
    "token the prefill emits before the first verify step",
    "sglang-derived": "SGLang meta_info without draft counts (older releases): accepted = completion_tokens "
    "- 1 - spec_verify_ct (the prefill emits the first token; every later token comes from a verify step)",
    "sglext": "SGLang sglext.spec_tokens_details (the same counts as meta_info): accept length = 1 + "
    "spec_num_correct_drafts / spec_verify_ct",
    "trtllm": "TensorRT-LLM choices[].speculative_decoding: accept length = 1 + total_accepted_draft_tokens "
    "/ num_spec_steps (TensorRT-LLM reports no mean length); histogram padded to K+1",
    "llamacpp": "llama.cpp timings: acceptance rate = draft_n_accepted / draft_n; it reports no step count",
    "llamacpp-k": "llama.cpp timings with K given: verify steps = draft_n / K, ASSUMING every step drafted K "
    "tokens (llama.cpp drafts fewer when the draft is unsure or the budget ends, so the true count is "
    "higher and the true accept length lower); accept length = 1 + draft_n_accepted / steps",
    "modelopt": "ModelOpt speculation_profile.json: pooled acceptance_length_histogram keyed by tokens "
    "emitted per step (a + 1, bonus included): a = key - 1; mean_accept_length is step-weighted, "
    "mean_accept_length_per_request averages requests",
    "sglang-server-info": "SGLang /server_info internal_states[0].avg_spec_accept_length: cumulative since "
    "the server started (accepted tokens incl. bonus / verify steps), updated when a decode log line is "
    "written",
}


@dataclass
class RequestNumbers:
    """One request's counts as an engine reported them, and SpecLens's metrics from them."""

    record: str  # where it is in the file: "line 3", "line 3, choice 1", "record 2"
    engine: str
    status: str = "ok"  # ok | no-verify-steps | not-reported | cumulative | not-measured
    note: str | None = None  # why a status is not ok, or the assumption made
    request_id: str | None = None
    verify_steps: int | None = None
    accepted_drafts: int | None = None
    drafted_tokens: int | None = None
    num_speculative_tokens: int | None = None  # K, where the engine says or the user gave it
    accept_histogram: list[int] | None = None  # steps accepting exactly a drafts, index a
    per_step_accepted: list[int] | None = None
    draft_lengths: list[int] | None = None  # the distinct numbers of drafts its verify steps ran
    completion_tokens: int | None = None
    prompt_ids: list[int] | None = None
    prompt_text: str | None = None
    prompt_messages: list | None = None  # a chat request's messages (the target's template renders them)
    engine_accept_length: float | None = None  # the engine's own figure, under its own definition
    accept_length: float | None = None
    acceptance_rate: float | None = None
    per_position_marginal: list[float | None] | None = None
    per_position_conditional: list[float | None] | None = None
    converted_from: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RequestsFile:
    source: str
    format: str
    requests: list[RequestNumbers]
    pooled: dict
    skipped_chunks: int = 0  # streaming chunks that carry no statistics (they ride the last one)
    extra: dict = field(default_factory=dict)  # a profile's per_category, a server_info window

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "format": self.format,
            "requests": [r.to_dict() for r in self.requests],
            "pooled": self.pooled,
            "skipped_stream_chunks": self.skipped_chunks,
            **self.extra,
        }


class Where:
    """Names a place in the file for error messages: 'FILE: line N: field: reason'."""

    def __init__(self, source: str, record: str):
        self.source, self.record = source, record

    def fail(self, reason: str):
        raise BadInput(f"{self.source}: {self.record}: {reason}")

    def count(self, value, name: str, optional: bool = False) -> int | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{name} is {json.dumps(value)[:40]}, expected an integer >= 0")
        if value < 0:
            self.fail(f"{name} is {value}: a count is >= 0")
        return value

    def counts(self, value, name: str) -> list[int]:
        if not isinstance(value, list):
            self.fail(f"{name} is {json.dumps(value)[:40]}, expected a list of integers >= 0")
        return [self.count(v, f"{name}[{i}]") for i, v in enumerate(value)]

    def number(self, value, name: str, optional: bool = True) -> float | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(f"{name} is {json.dumps(value)[:40]}, expected a finite number")
        if value < 0:
            self.fail(f"{name} is {value}: expected a number >= 0")
        return float(value)

    def obj(self, value, name: str) -> dict:
        if not isinstance(value, dict):
            self.fail(f"{name} is {type(value).__name__}, expected a JSON object")
        return value


# ---------------------------------------------------------------------------------- metrics


def dense(histogram: dict | list, where: Where, name: str) -> list[int]:
    """A histogram as a dense list indexed by a; a dict with string keys (JSON) is accepted."""
    if isinstance(histogram, dict):
        try:
            keyed = {int(k): v for k, v in histogram.items()}
        except ValueError:
            where.fail(f"{name} has a key that is not an integer")
        if any(k < 0 for k in keyed):
            where.fail(f"{name} has a negative key")
        out = [0] * (max(keyed, default=-1) + 1)
        for k, v in keyed.items():
            out[k] = where.count(v, f"{name}[{k}]")
        return out
    return where.counts(histogram, name)


def histogram_metrics(histogram: list[int], k: int | None) -> tuple[list, list]:
    """(marginal, conditional) for positions 1..K, K = the configured draft length where known, else
    the largest a observed (positions past it are then not reported: nothing says they were drafted)."""
    steps = sum(histogram)
    positions = k if k is not None else len(histogram) - 1
    padded = histogram + [0] * max(0, positions + 1 - len(histogram))
    reached = [sum(padded[i:]) for i in range(positions + 1)]  # reached[0] = steps
    marginal = [reached[i] / steps if steps else None for i in range(1, positions + 1)]
    conditional = [reached[i] / reached[i - 1] if reached[i - 1] else None for i in range(1, positions + 1)]
    return marginal, conditional


def check_histogram(n: RequestNumbers, where: Where) -> None:
    """The histogram against the step and accepted counts and K; it then gives both counts (and is cut
    to K + 1 entries where K is known)."""
    steps = sum(n.accept_histogram)
    accepted = sum(a * c for a, c in enumerate(n.accept_histogram))
    if n.verify_steps is not None and steps != n.verify_steps:
        where.fail(
            f"the accept histogram sums to {steps} steps but the verify step count is {n.verify_steps}"
        )
    if n.accepted_drafts is not None and accepted != n.accepted_drafts:
        where.fail(
            f"the accept histogram gives {accepted} accepted drafts but the accepted count is {n.accepted_drafts}"
        )
    k = n.num_speculative_tokens
    if k is not None and len(n.accept_histogram) > k + 1:
        if any(n.accept_histogram[k + 1 :]):
            where.fail(f"the accept histogram has steps accepting more than K = {k}")
        n.accept_histogram = n.accept_histogram[: k + 1]
    n.verify_steps, n.accepted_drafts = steps, accepted


def check_per_step(n: RequestNumbers, where: Where) -> None:
    """One per_step_accepted entry a verify step, summing to the accepted count."""
    if n.verify_steps is not None and len(n.per_step_accepted) != n.verify_steps:
        where.fail(f"per_step_accepted has {len(n.per_step_accepted)} entries for {n.verify_steps} steps")
    if n.accepted_drafts is not None and sum(n.per_step_accepted) != n.accepted_drafts:
        where.fail(f"per_step_accepted sums to {sum(n.per_step_accepted)}, not {n.accepted_drafts}")


def check_bounds(n: RequestNumbers, where: Where) -> None:
    """No more accepted drafts than were drafted, nor than K a verify step allows."""
    if n.accepted_drafts is None:
        return
    if n.drafted_tokens is not None and n.accepted_drafts > n.drafted_tokens:
        where.fail(f"{n.accepted_drafts} accepted drafts of {n.drafted_tokens} drafted tokens")
    if (
        n.verify_steps is not None
        and n.num_speculative_tokens
        and n.accepted_drafts > n.verify_steps * n.num_speculative_tokens
    ):
        where.fail(
            f"{n.accepted_drafts} accepted drafts in {n.verify_steps} steps of at most K = "
            f"{n.num_speculative_tokens}"
        )


def compute_metrics(n: RequestNumbers) -> None:
    """SpecLens's metrics from the checked counts (DEFINITIONS)."""
    if n.verify_steps and n.accepted_drafts is not None:
        n.accept_length = 1 + n.accepted_drafts / n.verify_steps
    if n.drafted_tokens:
        n.acceptance_rate = (n.accepted_drafts or 0) / n.drafted_tokens
    if n.accept_histogram is not None:
        n.per_position_marginal, n.per_position_conditional = histogram_metrics(
            n.accept_histogram, n.num_speculative_tokens
        )


def finish(numbers: RequestNumbers, where: Where) -> RequestNumbers:
    """Check the counts against each other and compute SpecLens's metrics from them."""
    if numbers.accept_histogram is not None:
        check_histogram(numbers, where)
    if numbers.per_step_accepted is not None:
        check_per_step(numbers, where)
    check_bounds(numbers, where)
    if numbers.status == "ok" and not numbers.verify_steps:
        numbers.status = "no-verify-steps"
        numbers.note = numbers.note or "the request ran no verify step: it has no accept length"
    if numbers.status == "ok":
        compute_metrics(numbers)
    return numbers


def check_engine_mean(numbers: RequestNumbers, where: Where, name: str) -> None:
    """An engine's own mean must agree with its counts: a file where it does not is not trusted."""
    own, ours = numbers.engine_accept_length, numbers.accept_length
    if own is not None and ours is not None and abs(own - ours) > MEAN_TOLERANCE:
        where.fail(f"{name} is {own:g} but the counts give {ours:.6g}")


# ------------------------------------------------------------------------------- the engines


def prompt_of(record: dict, response: dict) -> tuple[list[int] | None, str | None, list | None]:
    """The prompt when the file has it: ids (prompt_token_ids / input_ids), text (a saved request's
    prompt or text; llama.cpp echoes `prompt` in its response) or a chat request's messages, from the
    response or from a saved request beside it ({"request": ..., "response": ...}). A response's own
    `text` is its output, never read as the prompt."""
    request = record.get("request") if isinstance(record.get("request"), dict) else {}
    choices = response.get("choices") if isinstance(response.get("choices"), list) else []
    first = choices[0] if choices and isinstance(choices[0], dict) else {}
    for holder in (response, first, record, request):
        for key in ("prompt_token_ids", "input_ids", "prompt_ids"):
            ids = holder.get(key)
            if (
                isinstance(ids, list)
                and ids
                and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
            ):
                return list(ids), None, None
    for holder, keys in ((request, ("prompt", "text")), (response, ("prompt",))):
        for key in keys:
            value = holder.get(key)
            if isinstance(value, list) and value and all(isinstance(i, int) for i in value):
                return list(value), None, None
            if isinstance(value, str) and value:
                return None, value, None
    messages = request.get("messages")
    if isinstance(messages, list) and messages and all(isinstance(m, dict) and "role" in m for m in messages):
        return None, None, messages
    return None, None, None


def response_id(response: dict) -> str | None:
    value = response.get("id")
    if value is None and isinstance(response.get("meta_info"), dict):
        value = response["meta_info"].get("id")
    return None if value is None else str(value)


def parse_vllm(response: dict, where: Where, base: dict) -> list[RequestNumbers]:
    # vllm/v1/metrics/stats.py RequestSpecDecodeMetrics (observe / to_dict; PR #48915) and
    # docs/features/speculative_decoding/acceptance_metrics.md: top-level metrics.speculative_decoding,
    # null for n > 1, riding the final usage chunk when streaming.
    metrics = response.get("metrics")
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    choices = response.get("choices") if isinstance(response.get("choices"), list) else []
    if spec is None:
        why = (
            f"n > 1 ({len(choices)} choices): vLLM reports per-request metrics for single-sequence requests only"
            if len(choices) > 1
            else "metrics.speculative_decoding is null (the server ran without --per-request-spec-decode-metrics?)"
        )
        return [RequestNumbers(**base, status="not-reported", note=why)]
    field_name = "metrics.speculative_decoding"
    spec = where.obj(spec, field_name)
    k = where.count(spec.get("num_spec_tokens"), f"{field_name}.num_spec_tokens", optional=True)
    histogram = dense(spec.get("acceptance_histogram", []), where, f"{field_name}.acceptance_histogram")
    if k is not None and len(histogram) < k + 1:
        histogram = histogram + [0] * (k + 1 - len(histogram))  # vLLM writes K+1; a short one is read padded
    if k is not None and len(histogram) > k + 1:
        where.fail(
            f"{field_name}.acceptance_histogram has {len(histogram)} entries, vLLM writes K+1 = {k + 1}"
        )
    by_length = _by_draft_length(spec, histogram, where, field_name)
    steps = where.count(spec.get("num_spec_steps"), f"{field_name}.num_spec_steps")
    per_step = spec.get("per_step_accepted")
    numbers = RequestNumbers(
        **base,
        verify_steps=steps,
        accepted_drafts=where.count(
            spec.get("num_accepted_draft_tokens"), f"{field_name}.num_accepted_draft_tokens"
        ),
        drafted_tokens=where.count(spec.get("num_draft_tokens"), f"{field_name}.num_draft_tokens"),
        num_speculative_tokens=k,
        accept_histogram=histogram,
        per_step_accepted=None
        if per_step is None
        else where.counts(per_step, f"{field_name}.per_step_accepted"),
        engine_accept_length=where.number(
            spec.get("mean_acceptance_length"), f"{field_name}.mean_acceptance_length"
        ),
        converted_from=CONVERTED["vllm"],
    )
    numbers.draft_lengths = _draft_lengths(spec, numbers, by_length, where, field_name)
    finish(numbers, where)
    check_engine_mean(numbers, where, f"{field_name}.mean_acceptance_length")
    return [numbers]


def _by_draft_length(spec: dict, histogram: list[int], where: Where, field_name: str) -> set[str] | None:
    """Newer revisions' {"k": [k+1 buckets]} (string keys), checked to sum to the histogram: the keys
    with a step."""
    by_length = spec.get("acceptance_histogram_by_draft_length")
    if by_length is None:
        return None
    rows = where.obj(by_length, f"{field_name}.acceptance_histogram_by_draft_length")
    summed = [0] * len(histogram)
    lengths = set()
    for key, row in rows.items():
        row = where.counts(row, f"{field_name}.acceptance_histogram_by_draft_length[{key}]")
        for a, c in enumerate(row):
            if a >= len(summed):
                where.fail(f"{field_name}.acceptance_histogram_by_draft_length[{key}] is longer than K+1")
            summed[a] += c
        if sum(row):
            lengths.add(key)
    if summed != histogram:
        where.fail(f"{field_name}.acceptance_histogram_by_draft_length does not sum to acceptance_histogram")
    return lengths


def _draft_lengths(spec: dict, numbers, by_length: set[str] | None, where: Where, field_name: str):
    """The distinct draft lengths of the steps: per_step_drafted (checked against the total), else the
    histogram's keys."""
    drafted = spec.get("per_step_drafted")
    if drafted is not None:
        drafted = where.counts(drafted, f"{field_name}.per_step_drafted")
        if sum(drafted) != numbers.drafted_tokens:
            where.fail(f"{field_name}.per_step_drafted does not sum to num_draft_tokens")
        return sorted(set(drafted))
    if by_length is not None:
        return sorted(_draft_length(key, where, field_name) for key in by_length)
    return None


def _draft_length(key: str, where: Where, field_name: str) -> int:
    try:
        return int(key)
    except ValueError:
        where.fail(f"{field_name}.acceptance_histogram_by_draft_length: key {key!r} is not a draft length")


# SGLang's names over its releases: (verify steps, correct drafts, proposed drafts, histogram).
# python/sglang/srt/managers/tokenizer_manager.py _calculate_spec_decoding_metrics (PR #3152:
# spec_verify_ct; later spec_accept_token_num / spec_draft_token_num), PRs #11144 / #18332
# (spec_num_correct_drafts, spec_num_proposed_drafts, spec_correct_drafts_histogram; aliases
# spec_accepted_drafts / spec_proposed_drafts / spec_accept_histogram).
SGLANG_CORRECT = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
SGLANG_PROPOSED = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
SGLANG_HISTOGRAM = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def first_key(holder: dict, names: tuple[str, ...]) -> tuple[str | None, object]:
    for name in names:
        if holder.get(name) is not None:
            return name, holder[name]
    return None, None


def parse_sglang_counts(
    meta: dict, where: Where, base: dict, prefix: str, k: int | None, engine: str
) -> RequestNumbers:
    verify = where.count(meta.get("spec_verify_ct"), f"{prefix}.spec_verify_ct", optional=True)
    completion = where.count(meta.get("completion_tokens"), f"{prefix}.completion_tokens", optional=True)
    own = where.number(meta.get("spec_accept_length"), f"{prefix}.spec_accept_length")
    if not verify:
        # absent (or 0) when no verify step ran: SGLang adds the fields only after one
        return RequestNumbers(
            **base,
            completion_tokens=completion,
            verify_steps=0 if verify == 0 else None,
            status="no-verify-steps",
            note="no verify step reported (SGLang omits the counts when none ran, or speculative decoding is off)",
            engine_accept_length=own,
        )
    name, correct = first_key(meta, SGLANG_CORRECT)
    correct = where.count(correct, f"{prefix}.{name}", optional=True)
    name_p, proposed = first_key(meta, SGLANG_PROPOSED)
    proposed = where.count(proposed, f"{prefix}.{name_p}", optional=True)
    name_h, histogram = first_key(meta, SGLANG_HISTOGRAM)
    # SGLang grows the histogram to max(a) + 1, not K + 1 (managers/schedule_batch.py
    # Req.update_spec_correct_drafts_histogram, index = correct drafts, bonus excluded);
    # sglext fills an absent one with [] (entrypoints/openai/utils.py spec_tokens_details_from_meta_info)
    histogram = dense(histogram, where, f"{prefix}.{name_h}") if histogram else None
    converted = CONVERTED[engine]
    if correct is None and histogram is None:
        if completion is None:
            where.fail(f"{prefix} has spec_verify_ct but neither correct-draft counts nor completion_tokens")
        correct = completion - 1 - verify
        if correct < 0:
            where.fail(f"{prefix}: completion_tokens {completion} < 1 + spec_verify_ct {verify}")
        converted = CONVERTED["sglang-derived"]
    numbers = RequestNumbers(
        **base,
        verify_steps=verify,
        accepted_drafts=correct,
        drafted_tokens=proposed,
        num_speculative_tokens=k,
        accept_histogram=histogram,
        completion_tokens=completion,
        engine_accept_length=own,
        converted_from=converted,
    )
    finish(numbers, where)
    # spec_accept_length = completion_tokens / spec_verify_ct = accept length + 1 / verify steps
    # (the prefill's token): checked against that identity, never reported as the accept length
    if own and completion is not None and abs(own - completion / verify) > MEAN_TOLERANCE:
        where.fail(
            f"{prefix}.spec_accept_length is {own:g} but completion_tokens / spec_verify_ct = {completion / verify:.6g}"
        )
    return numbers


def parse_sglang(response: dict, where: Where, base: dict, k: int | None) -> list[RequestNumbers]:
    # native /generate: meta_info per response (a list for a batch or n > 1, each its own sequence);
    # the OpenAI endpoints put it in choices[i].meta_info
    if isinstance(response.get("meta_info"), dict):
        return [parse_sglang_counts(response["meta_info"], where, base, "meta_info", k, "sglang")]
    out = []
    for i, choice in enumerate(response.get("choices") or []):
        if isinstance(choice, dict) and "meta_info" in choice:
            meta = where.obj(choice["meta_info"], f"choices[{i}].meta_info")
            out.append(
                parse_sglang_counts(
                    meta,
                    where,
                    {**base, "record": f"{base['record']}, choice {i}"},
                    f"choices[{i}].meta_info",
                    k,
                    "sglang",
                )
            )
    return out


def parse_sglext(response: dict, where: Where, base: dict, k: int | None) -> list[RequestNumbers]:
    # python/sglang/srt/entrypoints/openai/protocol.py SglExt / SpecTokensDetails and utils.py
    # process_spec_tokens_details_from_ret (PR #33518): present when the request set
    # return_spec_tokens_details; a list (one per choice) when n > 1
    if "sglext" not in response and isinstance(response.get("choices"), list):
        # utils.py spec_tokens_details_from_meta_info returns None when meta_info has no spec counts (no
        # verify step ran), and the response then has no sglext at all: a zero-step request, not bad input
        return [
            RequestNumbers(
                **base,
                verify_steps=0,
                status="no-verify-steps",
                note="no sglext: SGLang leaves it out when the request ran no verify step",
            )
        ]
    details = where.obj(response.get("sglext"), "sglext").get("spec_tokens_details")
    if details is None:
        return [
            RequestNumbers(
                **base,
                status="not-reported",
                note="sglext has no spec_tokens_details (the request did not set return_spec_tokens_details)",
            )
        ]
    if isinstance(details, list):
        return [
            parse_sglang_counts(
                where.obj(d, f"sglext.spec_tokens_details[{i}]"),
                where,
                {**base, "record": f"{base['record']}, choice {i}"},
                f"sglext.spec_tokens_details[{i}]",
                k,
                "sglext",
            )
            for i, d in enumerate(details)
        ]
    return [
        parse_sglang_counts(
            where.obj(details, "sglext.spec_tokens_details"),
            where,
            base,
            "sglext.spec_tokens_details",
            k,
            "sglext",
        )
    ]


def parse_trtllm(response: dict, where: Where, base: dict) -> list[RequestNumbers]:
    # TensorRT-LLM PR #19311 (open): choices[].speculative_decoding with acceptance_rate,
    # total_accepted_draft_tokens, total_draft_tokens, num_spec_steps, acceptance_histogram (padded to
    # K+1), num_spec_tokens; no mean length. Omitted for a choice that never drafted. Field names as
    # aiperf's TRTLLMSpecDecodeAdapter reads them (aiperf/spec_decode, tensorrt_llm adapter).
    out = []
    for i, choice in enumerate(response.get("choices") or []):
        record = f"{base['record']}, choice {i}" if len(response["choices"]) > 1 else base["record"]
        here = Where(where.source, record)
        spec = choice.get("speculative_decoding") if isinstance(choice, dict) else None
        if spec is None:
            out.append(
                RequestNumbers(
                    **{**base, "record": record},
                    status="no-verify-steps",
                    note="no speculative_decoding block: TensorRT-LLM omits it when the request never drafted",
                )
            )
            continue
        name = f"choices[{i}].speculative_decoding"
        spec = here.obj(spec, name)
        k = here.count(spec.get("num_spec_tokens"), f"{name}.num_spec_tokens", optional=True)
        histogram = spec.get("acceptance_histogram")
        histogram = None if histogram is None else dense(histogram, here, f"{name}.acceptance_histogram")
        if histogram is not None and k is not None and len(histogram) < k + 1:
            histogram = histogram + [0] * (k + 1 - len(histogram))  # padded to K+1, as TensorRT-LLM writes it
        numbers = RequestNumbers(
            **{**base, "record": record},
            verify_steps=here.count(spec.get("num_spec_steps"), f"{name}.num_spec_steps"),
            accepted_drafts=here.count(
                spec.get("total_accepted_draft_tokens"), f"{name}.total_accepted_draft_tokens"
            ),
            drafted_tokens=here.count(spec.get("total_draft_tokens"), f"{name}.total_draft_tokens"),
            num_speculative_tokens=k,
            accept_histogram=histogram,
            converted_from=CONVERTED["trtllm"],
        )
        finish(numbers, here)
        rate = here.number(spec.get("acceptance_rate"), f"{name}.acceptance_rate")
        if (
            rate is not None
            and numbers.acceptance_rate is not None
            and abs(rate - numbers.acceptance_rate) > MEAN_TOLERANCE
        ):
            here.fail(f"{name}.acceptance_rate is {rate:g} but the counts give {numbers.acceptance_rate:.6g}")
        out.append(numbers)
    return out


def parse_llamacpp(response: dict, where: Where, base: dict, k: int | None) -> list[RequestNumbers]:
    # llama.cpp tools/server/server-task.cpp result_timings::to_json (#12603): timings.draft_n and
    # timings.draft_n_accepted, present only when draft_n > 0; no verify-step count
    timings = where.obj(response.get("timings"), "timings")
    if timings.get("draft_n") is None:
        return [
            RequestNumbers(
                **base,
                status="no-verify-steps",
                note="timings has no draft_n: llama.cpp writes it only when the request drafted",
            )
        ]
    drafted = where.count(timings.get("draft_n"), "timings.draft_n")
    accepted = where.count(timings.get("draft_n_accepted"), "timings.draft_n_accepted")
    numbers = RequestNumbers(
        **base,
        accepted_drafts=accepted,
        drafted_tokens=drafted,
        num_speculative_tokens=k,
        completion_tokens=where.count(timings.get("predicted_n"), "timings.predicted_n", optional=True),
        converted_from=CONVERTED["llamacpp"],
    )
    if accepted > drafted:
        where.fail(f"timings.draft_n_accepted {accepted} > timings.draft_n {drafted}")
    if not drafted:
        numbers.status, numbers.note = "no-verify-steps", "draft_n is 0: nothing was drafted"
        return [numbers]
    numbers.acceptance_rate = accepted / drafted
    if k is None:
        numbers.note = (
            "accept length not computed: llama.cpp reports no step count; give --num-speculative-tokens K"
        )
        return [numbers]
    steps = drafted / k  # an estimate, kept unrounded so that pooling stays 1 + accepted / steps
    numbers.verify_steps = int(steps) if steps.is_integer() else steps
    numbers.accept_length = 1 + accepted / (drafted / k)
    numbers.converted_from = CONVERTED["llamacpp-k"]
    numbers.note = f"assumes every verify step drafted K = {k} tokens (llama.cpp does not say)"
    return [numbers]


def parse_modelopt(doc: dict, where: Where) -> tuple[list[RequestNumbers], dict]:
    # ModelOpt examples/specdec_bench speculation_profile.py build_profile (and
    # examples/speculative_decoding/ar_validate.py _write_speculation_profile, the same schema):
    # pooled acceptance_length_histogram keyed by emitted length a + 1; marginal[i] = P(length >= i+2)
    base = {"record": "the profile", "engine": "modelopt", "converted_from": CONVERTED["modelopt"]}
    if doc.get("measured") is False:
        return [RequestNumbers(**base, status="not-measured", note="measured: false (a stub profile)")], {}
    k = where.count(doc.get("num_speculative_tokens"), "num_speculative_tokens")
    by_length = where.obj(doc.get("acceptance_length_histogram"), "acceptance_length_histogram")
    emitted = dense(by_length, where, "acceptance_length_histogram")
    if emitted and emitted[0]:
        where.fail(
            "acceptance_length_histogram has steps of length 0: lengths count the bonus token, so start at 1"
        )
    histogram = emitted[1:]
    numbers = RequestNumbers(
        **base,
        verify_steps=sum(histogram),
        num_speculative_tokens=k,
        accept_histogram=histogram,
        engine_accept_length=where.number(doc.get("mean_accept_length"), "mean_accept_length"),
        # The profile has no drafted count; a fixed-K chain drafts K per verify step, so the acceptance
        # rate (accepted / drafted) is (accept length - 1) / K: derived, and said so.
        drafted_tokens=sum(histogram) * k if k else None,
    )
    if k:
        numbers.note = (
            f"drafted tokens derived: {k} (num_speculative_tokens) per verify step, a fixed-K chain; "
            "acceptance rate = (accept length - 1) / K"
        )
    finish(numbers, where)
    check_engine_mean(numbers, where, "mean_accept_length")
    notes = []  # the profile's own vectors come from ModelOpt's AcceptanceRate, not from the histogram:
    # a disagreement is said, not fatal (the histogram is what SpecLens computes from)
    for key, ours in (
        ("marginal_accept_rates", numbers.per_position_marginal),
        ("conditional_accept_rates", numbers.per_position_conditional),
    ):
        theirs = doc.get(key)
        if theirs is None or ours is None:
            continue
        if not isinstance(theirs, list) or len(theirs) != len(ours):
            where.fail(f"{key} should have K = {k} entries")
        for i, (a, b) in enumerate(zip(theirs, ours, strict=True)):
            a = where.number(a, f"{key}[{i}]", optional=False)
            if abs(a - (b or 0.0)) > MEAN_TOLERANCE:
                notes.append(f"{key}[{i}] is {a:g} but the histogram gives {b or 0.0:.6g}")
    per_request = where.number(doc.get("mean_accept_length_per_request"), "mean_accept_length_per_request")
    extra = {
        "profile": {
            "mean_accept_length_per_request": per_request,
            "per_category": doc.get("per_category"),
            "method": doc.get("method"),
            "measurement_conditions": doc.get("measurement_conditions"),
            "schema_version": doc.get("schema_version"),
            "disagreements": notes,
        }
    }
    return [numbers], extra


# SGLang scheduler.py get_internal_state: avg_spec_accept_length = cum_spec_accept_length /
# cum_spec_accept_count (later metrics_reporter.spec_total_num_accept_tokens / spec_total_num_forward_ct),
# accumulated in log_decode_stats: cumulative since start, moving only when a decode line is logged.
SERVER_INFO_COUNTS = (
    ("cum_spec_accept_length", "cum_spec_accept_count"),
    ("spec_total_num_accept_tokens", "spec_total_num_forward_ct"),
    (None, "spec_verify_ct"),  # a verify count saved beside the read: tokens = average x count
)


def parse_server_info(reads: list[tuple[str, dict]], source: str) -> tuple[list[RequestNumbers], dict]:
    numbers, states = [], []
    for record, read in reads:
        where = Where(source, record)
        internal = read.get("internal_states")
        if not isinstance(internal, list) or not internal or not isinstance(internal[0], dict):
            where.fail("internal_states is not a non-empty list of objects")
        state = internal[0]
        average = where.number(
            state.get("avg_spec_accept_length"), "internal_states[0].avg_spec_accept_length"
        )
        tokens = steps = None
        for tokens_key, steps_key in SERVER_INFO_COUNTS:
            holder = state if state.get(steps_key) is not None else read
            if holder.get(steps_key) is None:
                continue
            steps = where.count(holder.get(steps_key), steps_key)
            if tokens_key is not None and holder.get(tokens_key) is not None:
                tokens = where.number(holder.get(tokens_key), tokens_key, optional=False)
                if average is not None and steps and abs(tokens / steps - average) > MEAN_TOLERANCE:
                    where.fail(f"avg_spec_accept_length {average:g} is not {tokens_key} / {steps_key}")
            else:
                tokens = (average or 0.0) * steps
            break
        states.append((where, average, tokens, steps))
        numbers.append(
            RequestNumbers(
                record=record,
                engine="sglang-server-info",
                status="cumulative",
                engine_accept_length=average,
                verify_steps=steps,
                note="cumulative since the server started: not this window's accept length",
                converted_from=CONVERTED["sglang-server-info"],
            )
        )
    window = None
    if len(states) == 2:
        (w1, _, tokens1, steps1), (w2, _, tokens2, steps2) = states
        if steps1 is None or steps2 is None:
            window = {
                "accept_length": None,
                "note": "the reads carry no cumulative verify count, so their "
                "averages cannot be differenced into a window (an average of averages is not one)",
            }
        elif steps2 < steps1 or tokens2 < tokens1:
            w2.fail(f"the counts went down since {w1.record} (a restart?)")
        elif steps2 == steps1:
            window = {
                "accept_length": None,
                "verify_steps": 0,
                "note": "no decode log line was written between the reads: nothing to difference",
            }
        else:
            window = {
                "accept_length": (tokens2 - tokens1) / (steps2 - steps1),
                "verify_steps": steps2 - steps1,
                "definition": "(accepted tokens incl. bonus, later - earlier) / (verify steps, later - earlier)",
            }
    elif len(states) > 2:
        raise BadInput(
            f"{source}: give one /server_info read (cumulative) or two (earlier, later), not {len(states)}"
        )
    return numbers, {"window": window}


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
    parsed, extra = parse_modelopt(records[0][1], Where(source, records[0][0]))
    summary = pooled(parsed)
    # one pooled histogram, not requests: the per-request mean is the profile's own (ModelOpt's
    # Average_AL over requests), not the mean over this file's one "request"
    summary["accept_length_per_request_mean"] = (extra.get("profile") or {}).get(
        "mean_accept_length_per_request"
    )
    summary["pooled_only"] = True
    return RequestsFile(source, "modelopt", parsed, summary, 0, extra)


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
    extra: dict = {}
    if out.server_reads:
        parsed, extra = parse_server_info(out.server_reads, source)
    if not parsed:
        raise BadInput(f"{source}: no response in it")
    return RequestsFile(source, found, parsed, pooled(parsed), skipped, extra)


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


def pooled(requests: list[RequestNumbers]) -> dict:
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
    return {
        "requests": len(requests),
        "with_accept_length": len(counted),
        "statuses": statuses,
        "verify_steps": steps,
        "accepted_drafts": accepted,
        "drafted_tokens": drafted if rated else None,
        "num_speculative_tokens": k,
        "accept_length": 1 + accepted / steps if steps else None,
        "accept_length_per_request_mean": sum(r.accept_length for r in counted) / len(counted)
        if counted
        else None,
        "accept_length_per_request_ci95": mean_ci95([r.accept_length for r in counted]),
        "acceptance_rate": sum(r.accepted_drafts or 0 for r in rated) / drafted if drafted else None,
        "per_position_marginal": marginal,
        "per_position_conditional": conditional,
        "accept_histogram": histogram,
        "definitions": DEFINITIONS,
    }
