"""Per-request readers of SGLang: meta_info counts of /generate and the OpenAI adapter, the sglext
block, and two /server_info reads (docs/reference.md §14)."""

from __future__ import annotations

from backend import BadInput
from backend.data.request_numbers import (
    CONVERTED,
    MEAN_TOLERANCE,
    RequestNumbers,
    ServerWindow,
    Where,
    dense,
    finish,
)

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


SERVER_INFO_COUNTS = (
    ("cum_spec_accept_length", "cum_spec_accept_count"),
    ("spec_total_num_accept_tokens", "spec_total_num_forward_ct"),
    (None, "spec_verify_ct"),  # a verify count saved beside the read: tokens = average x count
)


def parse_server_info(
    reads: list[tuple[str, dict]], source: str
) -> tuple[list[RequestNumbers], ServerWindow | None]:
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
            window = ServerWindow(
                note="the reads carry no cumulative verify count, so their "
                "averages cannot be differenced into a window (an average of averages is not one)",
            )
        elif steps2 < steps1 or tokens2 < tokens1:
            w2.fail(f"the counts went down since {w1.record} (a restart?)")
        elif steps2 == steps1:
            window = ServerWindow(
                verify_steps=0,
                note="no decode log line was written between the reads: nothing to difference",
            )
        else:
            window = ServerWindow(
                accept_length=(tokens2 - tokens1) / (steps2 - steps1),
                verify_steps=steps2 - steps1,
                definition="(accepted tokens incl. bonus, later - earlier) / (verify steps, later - earlier)",
            )
    elif len(states) > 2:
        raise BadInput(
            f"{source}: give one /server_info read (cumulative) or two (earlier, later), not {len(states)}"
        )
    return numbers, window
