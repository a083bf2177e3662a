"""Per-request readers of vLLM (metrics.speculative_decoding), TensorRT-LLM, llama.cpp and ModelOpt's
speculation profile; each turns a response into `RequestNumbers` (docs/reference.md §14)."""

from __future__ import annotations

from backend.data.request_numbers import (
    CONVERTED,
    MEAN_TOLERANCE,
    ModelOptProfile,
    RequestNumbers,
    Where,
    check_engine_mean,
    dense,
    finish,
)


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


def parse_modelopt(doc: dict, where: Where) -> tuple[list[RequestNumbers], ModelOptProfile | None]:
    # ModelOpt examples/specdec_bench speculation_profile.py build_profile (and
    # examples/speculative_decoding/ar_validate.py _write_speculation_profile, the same schema):
    # pooled acceptance_length_histogram keyed by emitted length a + 1; marginal[i] = P(length >= i+2)
    base = {"record": "the profile", "engine": "modelopt", "converted_from": CONVERTED["modelopt"]}
    if doc.get("measured") is False:
        return [RequestNumbers(**base, status="not-measured", note="measured: false (a stub profile)")], None
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
    profile = ModelOptProfile(
        mean_accept_length_per_request=per_request,
        per_category=doc.get("per_category"),
        method=doc.get("method"),
        measurement_conditions=doc.get("measurement_conditions"),
        schema_version=doc.get("schema_version"),
        disagreements=notes,
    )
    return [numbers], profile


# SGLang scheduler.py get_internal_state: avg_spec_accept_length = cum_spec_accept_length /
# cum_spec_accept_count (later metrics_reporter.spec_total_num_accept_tokens / spec_total_num_forward_ct),
# accumulated in log_decode_stats: cumulative since start, moving only when a decode line is logged.
