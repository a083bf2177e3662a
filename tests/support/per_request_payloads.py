"""Engine responses built from a known truth: per-request lists of accepted drafts a per verify step.

Each writer lays the counts out as that engine does (docs/reference.md §14): vLLM's histogram has
K+1 entries, SGLang's grows to max(a)+1, TensorRT-LLM's is padded to K+1, llama.cpp gives totals
only, ModelOpt's profile is pooled and keyed by a+1. The truth's own numbers (`truth`) come from
the lists directly, so a parser that reads a file back can be checked against them.
"""

from __future__ import annotations

import json

# Five requests at K = 3: a short one, a perfect one, one with no verify step, two ordinary ones.
K = 3
REQUESTS = [[0, 1, 0], [3, 3, 3, 3], [], [2, 0, 1, 3, 1, 0], [1, 1, 2]]
PROMPTS = [[11, 12, 13], [21, 22], [31, 32, 33, 34], [41], [51, 52]]


def histogram(a_list: list[int], length: int) -> list[int]:
    return [sum(1 for a in a_list if a == i) for i in range(length)]


def truth(requests: list[list[int]] = REQUESTS, k: int = K) -> dict:
    """Per-request accept length (None without a step) and the pooled, step-weighted values."""
    lengths = [1 + sum(a) / len(a) if a else None for a in requests]
    steps = [a for r in requests for a in r]
    reached = [sum(1 for a in steps if a >= i) for i in range(k + 1)]
    counted = [x for x in lengths if x is not None]
    return {
        "accept_length": lengths,
        "acceptance_rate": [sum(a) / (len(a) * k) if a else None for a in requests],
        "pooled_accept_length": 1 + sum(steps) / len(steps),
        "per_request_mean": sum(counted) / len(counted),
        "pooled_acceptance_rate": sum(steps) / (len(steps) * k),
        "marginal": [reached[i] / len(steps) for i in range(1, k + 1)],
        "conditional": [reached[i] / reached[i - 1] for i in range(1, k + 1)],
        "verify_steps": len(steps),
    }


def jsonl(records: list) -> str:
    return "\n".join(json.dumps(r) for r in records) + "\n"


# ------------------------------------------------------------------------------------- vLLM


def vllm_block(a_list: list[int], k: int, detailed: bool) -> dict:
    steps, accepted = len(a_list), sum(a_list)
    block = {
        "mean_acceptance_length": 1 + accepted / steps if steps else 1.0,
        "draft_acceptance_rate": accepted / (steps * k) if steps else 0.0,
        "acceptance_histogram": histogram(a_list, k + 1),
        "acceptance_histogram_by_draft_length": {str(k): histogram(a_list, k + 1)} if steps else {},
        "num_spec_steps": steps,
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": steps * k,
        "num_spec_tokens": k,
    }
    if detailed:
        block["per_step_accepted"] = list(a_list)
        block["per_step_drafted"] = [k] * steps
    return block


def vllm(requests=REQUESTS, k=K, detailed=True, n_gt_1=True, stream_last=True) -> str:
    records = []
    for i, a_list in enumerate(requests):
        if stream_last and i == len(requests) - 1:
            # streamed: chunks without statistics, then the final usage chunk carrying metrics
            for piece in ("he", "llo"):
                records.append(
                    {
                        "id": f"cmpl-{i}",
                        "object": "text_completion",
                        "choices": [{"index": 0, "text": piece, "finish_reason": None}],
                    }
                )
            records.append(
                {
                    "id": f"cmpl-{i}",
                    "object": "text_completion",
                    "choices": [],
                    "usage": {"completion_tokens": 1 + len(a_list) + sum(a_list)},
                    "metrics": {"speculative_decoding": vllm_block(a_list, k, detailed)},
                }
            )
            continue
        records.append(
            {
                "id": f"cmpl-{i}",
                "object": "text_completion",
                "choices": [
                    {"index": 0, "text": "x", "finish_reason": "length", "prompt_token_ids": PROMPTS[i]}
                ],
                "usage": {"completion_tokens": 1 + len(a_list) + sum(a_list)},
                "metrics": {
                    "time_to_first_token_ms": 3.0,
                    "speculative_decoding": vllm_block(a_list, k, detailed),
                },
            }
        )
    if n_gt_1:
        records.append(
            {
                "id": "cmpl-n2",
                "object": "text_completion",
                "choices": [
                    {"index": 0, "text": "a", "finish_reason": "length"},
                    {"index": 1, "text": "b", "finish_reason": "length"},
                ],
                "metrics": {"speculative_decoding": None},
            }
        )
    return jsonl(records)


# ------------------------------------------------------------------------------------ SGLang


def sglang_meta(a_list: list[int], k: int, old_names: bool = False, rid: str = "r") -> dict:
    steps, accepted = len(a_list), sum(a_list)
    completion = 1 + steps + accepted  # the prefill emits the first token
    meta = {
        "id": rid,
        "prompt_tokens": 3,
        "completion_tokens": completion,
        "finish_reason": {"type": "length"},
    }
    if not steps:
        return meta  # SGLang adds no spec field when no verify step ran
    meta.update(
        {
            "spec_verify_ct": steps,
            "spec_accept_length": completion / steps,
            "spec_accept_rate": accepted / (steps * k),
        }
    )
    if old_names:
        meta.update({"spec_accept_token_num": accepted, "spec_draft_token_num": steps * k})
    else:
        meta.update(
            {
                "spec_num_correct_drafts": accepted,
                "spec_num_proposed_drafts": steps * k,
                "spec_correct_drafts_histogram": histogram(a_list, max(a_list) + 1),
            }
        )
    return meta


def sglang(requests=REQUESTS, k=K, n_gt_1=True, old_names_for=(4,), stream_last=True) -> str:
    records = []
    for i, a_list in enumerate(requests):
        if stream_last and i == len(requests) - 1 and a_list:
            # streamed /generate: each chunk carries the meta_info so far under the same id
            for upto in range(1, len(a_list)):
                chunk = sglang_meta(a_list[:upto], k, rid=f"req-{i}")
                records.append({"text": "x", "meta_info": chunk})
        meta = sglang_meta(a_list, k, i in old_names_for, rid=f"req-{i}")
        records.append({"request": {"input_ids": PROMPTS[i]}, "response": {"text": "x", "meta_info": meta}})
    if n_gt_1:  # a native /generate with n = 2 answers a list, one meta_info per sequence
        records.append(
            [
                {"text": "a", "meta_info": sglang_meta([1, 2], k, rid="n2-0")},
                {"text": "b", "meta_info": sglang_meta([0], k, rid="n2-1")},
            ]
        )
    return jsonl(records)


def sglext(requests=REQUESTS, k=K, n_gt_1=True, drop_empty=False) -> str:
    """drop_empty: a request that ran no verify step has no sglext at all, as SGLang writes it
    (spec_tokens_details_from_meta_info returns None without spec counts)."""
    records = []
    for i, a_list in enumerate(requests):
        meta = sglang_meta(a_list, k)
        details = {
            key: meta.get(key) or (0 if key != "spec_correct_drafts_histogram" else [])
            for key in (
                "spec_accept_rate",
                "spec_accept_length",
                "spec_num_correct_drafts",
                "spec_num_proposed_drafts",
                "spec_verify_ct",
                "spec_correct_drafts_histogram",
            )
        }
        details.update(
            {"spec_cap_length": 0.0, "spec_block_accept_length": 0.0, "spec_cap_lens_histogram": []}
        )
        records.append(
            {
                "id": f"chat-{i}",
                "object": "chat.completion",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "length"}
                ],
                "usage": {"completion_tokens": meta["completion_tokens"]},
                "sglext": {"spec_tokens_details": details},
            }
        )
        if drop_empty and not a_list:
            del records[-1]["sglext"]
    if n_gt_1:
        both = [sglang_meta([1, 2], k), sglang_meta([0], k)]
        records.append(
            {
                "id": "chat-n2",
                "object": "chat.completion",
                "choices": [{"index": 0}, {"index": 1}],
                "sglext": {
                    "spec_tokens_details": [
                        {
                            key: m[key]
                            for key in (
                                "spec_verify_ct",
                                "spec_num_correct_drafts",
                                "spec_num_proposed_drafts",
                                "spec_correct_drafts_histogram",
                            )
                        }
                        for m in both
                    ]
                },
            }
        )
    return jsonl(records)


def server_info_reads(before: list[list[int]], window: list[list[int]], sums: bool = True) -> str:
    """Two /server_info reads: the cumulative counts before a window and after it. `sums`: the
    scheduler's own cum_spec_accept_length / cum_spec_accept_count; else only a verify count saved
    beside each read (spec_verify_ct), the tokens then being the average times the count."""

    def read(requests):
        steps = [a for r in requests for a in r]
        tokens = sum(a + 1 for a in steps)
        state = {"last_gen_throughput": 10.0, "avg_spec_accept_length": tokens / len(steps)}
        if sums:
            state.update({"cum_spec_accept_length": tokens, "cum_spec_accept_count": len(steps)})
            return {"internal_states": [state]}
        return {"internal_states": [state], "spec_verify_ct": len(steps)}

    return jsonl([read(before), read(before + window)])


# ------------------------------------------------------------------ TensorRT-LLM, llama.cpp


def trtllm(requests=REQUESTS, k=K, short_histogram_for=(0,)) -> str:
    records = []
    for i, a_list in enumerate(requests):
        choice = {"index": 0, "text": "x", "finish_reason": "length"}
        if a_list:
            steps, accepted = len(a_list), sum(a_list)
            # TensorRT-LLM pads to K+1; one request is written short to check the padding is read
            length = max(a_list) + 1 if i in short_histogram_for else k + 1
            choice["speculative_decoding"] = {
                "acceptance_rate": accepted / (steps * k),
                "total_accepted_draft_tokens": accepted,
                "total_draft_tokens": steps * k,
                "num_spec_steps": steps,
                "acceptance_histogram": histogram(a_list, length),
                "num_spec_tokens": k,
            }
        records.append({"id": f"trt-{i}", "object": "text_completion", "choices": [choice]})
    return jsonl(records)


def llamacpp(requests=REQUESTS, k=K) -> str:
    records = []
    for i, a_list in enumerate(requests):
        timings = {"prompt_n": 3, "predicted_n": 1 + len(a_list) + sum(a_list), "predicted_ms": 10.0}
        if a_list:  # present only when draft_n > 0
            timings.update({"draft_n": len(a_list) * k, "draft_n_accepted": sum(a_list)})
        records.append(
            {
                "request": {"prompt": PROMPTS[i]},
                "response": {"content": "x", "tokens_predicted": timings["predicted_n"], "timings": timings},
            }
        )
    return jsonl(records)


# ------------------------------------------------------------------------------------ ModelOpt


def modelopt(requests=REQUESTS, k=K) -> str:
    t = truth(requests, k)
    steps = [a for r in requests for a in r]
    by_length = {str(a + 1): sum(1 for s in steps if s == a) for a in range(k + 1) if a in steps}
    return json.dumps(
        {
            "schema_version": "1.0",
            "measured": True,
            "method": "eagle3",
            "num_speculative_tokens": k,
            "conditional_accept_rates": [round(x, 6) for x in t["conditional"]],
            "marginal_accept_rates": [round(x, 6) for x in t["marginal"]],
            "mean_accept_length": round(t["pooled_accept_length"], 6),
            "mean_accept_length_per_request": round(t["per_request_mean"], 6),
            "acceptance_length_histogram": by_length,
            "per_category": {"coding": {"mean_accept_length": 2.5}},
        },
        indent=2,
    )


WRITERS = {"vllm": vllm, "sglang": sglang, "sglext": sglext, "trtllm": trtllm, "llamacpp": llamacpp}
