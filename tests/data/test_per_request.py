"""Per-request numbers of seven engine formats, read back against the truth they were built from
(tests/support/per_request_payloads.py lays the counts out as each engine does)."""

from __future__ import annotations

import json

import pytest

from backend import BadInput
from backend.data.per_request import read_requests
from tests.support import per_request_payloads as P

TOL = 0.01
N2 = [[1, 2], [0]]  # the two sequences of SGLang's n = 2 response (it breaks them down; vLLM does not)


def close(a, b):
    if a is None or b is None:
        return a is b
    return abs(a - b) <= TOL


def check_against(parsed, requests, k=P.K, marginals=True):
    t = P.truth(requests, k)
    lengths = [r.accept_length for r in parsed.requests if r.status in ("ok", "no-verify-steps")]
    assert len(lengths) == len(requests)
    assert all(close(a, b) for a, b in zip(lengths, t["accept_length"], strict=True)), lengths
    pooled = parsed.pooled
    assert close(pooled.accept_length, t["pooled_accept_length"])
    assert close(pooled.accept_length_per_request_mean, t["per_request_mean"])
    low, high = pooled.accept_length_per_request_ci95  # issue 42: the spread over requests beside it
    assert low < pooled.accept_length_per_request_mean < high
    assert close(pooled.acceptance_rate, t["pooled_acceptance_rate"])
    assert pooled.verify_steps == t["verify_steps"]
    if marginals:
        assert all(close(a, b) for a, b in zip(pooled.per_position_marginal, t["marginal"], strict=True))
        assert all(
            close(a, b) for a, b in zip(pooled.per_position_conditional, t["conditional"], strict=True)
        )


def test_vllm_detailed_with_a_stream_last_chunk_and_n_above_one():
    parsed = read_requests(P.vllm(), "vllm.jsonl")
    assert parsed.format == "vllm" and parsed.skipped_chunks == 2
    check_against(parsed, P.REQUESTS)
    statuses = [r.status for r in parsed.requests]
    assert statuses[2] == "no-verify-steps" and statuses[-1] == "not-reported"
    assert "n > 1" in parsed.requests[-1].note and parsed.requests[-1].accept_length is None
    assert parsed.requests[0].prompt_ids == P.PROMPTS[0]


def test_vllm_summary_as_one_json_document():
    text = json.dumps([json.loads(line) for line in P.vllm(detailed=False, stream_last=False).splitlines()])
    parsed = read_requests(text, "vllm.json")
    check_against(parsed, P.REQUESTS)
    assert parsed.requests[0].per_step_accepted is None


def test_a_short_vllm_histogram_is_read_padded_to_k_plus_one():
    short = edit(P.vllm(), 0, lambda r: spec(r).update(acceptance_histogram=[2, 1]))
    parsed = read_requests(short, "v.jsonl")
    assert parsed.requests[0].accept_histogram == [2, 1, 0, 0]
    check_against(parsed, P.REQUESTS)


def test_sglang_meta_info_with_max_a_histograms_old_names_and_a_batch_list():
    parsed = read_requests(P.sglang(old_names_for=()), "sglang.jsonl", num_speculative_tokens=P.K)
    check_against(parsed, P.REQUESTS + N2)
    assert parsed.skipped_chunks == 2  # the streamed request's earlier chunks: its last one counts
    first = parsed.requests[0]
    assert first.accept_histogram == [2, 1]  # SGLang's length max(a) + 1, read as is
    # spec_accept_length = completion / verify counts the prefill's token: never the accept length
    assert first.engine_accept_length == pytest.approx(first.accept_length + 1 / 3)
    with_old = read_requests(P.sglang(), "sglang.jsonl", num_speculative_tokens=P.K)
    check_against(with_old, P.REQUESTS + N2, marginals=False)  # one request has no histogram
    assert "completion_tokens" in with_old.requests[4].converted_from


def test_sglang_positions_without_k_stop_at_the_largest_a_seen():
    parsed = read_requests(P.sglang(requests=[[0, 1]], n_gt_1=False, old_names_for=()), "s.jsonl")
    assert parsed.requests[0].per_position_marginal == [0.5]  # a <= 1 seen; K unknown


def test_sglext_spec_tokens_details_with_a_list_for_n_above_one():
    parsed = read_requests(P.sglext(), "sglext.jsonl", num_speculative_tokens=P.K)
    assert parsed.format == "sglext"
    check_against(parsed, P.REQUESTS + N2)


def test_sglext_a_response_without_sglext_is_a_zero_step_request():
    """Issue 42: SGLang leaves sglext out of a response that ran no verify step; that row reads as
    no-verify-steps and the file is read, not refused. A record that is not a response still is."""
    parsed = read_requests(P.sglext(drop_empty=True), "sglext.jsonl", num_speculative_tokens=P.K)
    check_against(parsed, P.REQUESTS + N2)
    (empty,) = [r for r in parsed.requests if r.status == "no-verify-steps"]
    assert "no sglext" in empty.note
    with pytest.raises(BadInput, match="sglext"):
        read_requests(P.sglext() + '\n{"error": "overloaded"}\n', "sglext.jsonl")


def test_trtllm_choices_with_padded_and_short_histograms():
    parsed = read_requests(P.trtllm(), "trt.jsonl")
    assert parsed.format == "trtllm"
    check_against(parsed, P.REQUESTS)
    assert parsed.requests[0].accept_histogram == [2, 1, 0, 0]  # written short, read padded to K+1


def test_llamacpp_needs_k_for_an_accept_length_and_says_what_it_assumes():
    without = read_requests(P.llamacpp(), "llama.jsonl")
    assert all(r.accept_length is None for r in without.requests)
    assert close(without.requests[0].acceptance_rate, 1 / 9) and without.pooled.accept_length is None
    parsed = read_requests(P.llamacpp(), "llama.jsonl", num_speculative_tokens=P.K)
    check_against(parsed, P.REQUESTS, marginals=False)
    assert "assumes every verify step drafted K = 3" in parsed.requests[0].note
    assert parsed.requests[2].status == "no-verify-steps"


def test_modelopt_profile_is_pooled_and_keyed_by_emitted_length():
    parsed = read_requests(P.modelopt(), "speculation_profile.json")
    t = P.truth()
    assert parsed.format == "modelopt" and close(parsed.pooled.accept_length, t["pooled_accept_length"])
    assert all(close(a, b) for a, b in zip(parsed.pooled.per_position_marginal, t["marginal"], strict=True))
    assert close(parsed.profile.mean_accept_length_per_request, t["per_request_mean"])
    assert close(parsed.pooled.accept_length_per_request_mean, t["per_request_mean"])
    assert parsed.profile.disagreements == []
    # issue 42: the acceptance rate follows from a fixed-K chain's profile, and is said to be derived
    steps = [a for r in P.REQUESTS for a in r]
    assert close(parsed.pooled.acceptance_rate, sum(steps) / (len(steps) * P.K))
    assert abs(parsed.pooled.acceptance_rate - (parsed.pooled.accept_length - 1) / P.K) < 0.01
    assert "drafted tokens derived" in parsed.requests[0].note


def test_server_info_reads_are_differenced_into_a_window():
    before, window = P.REQUESTS[:2], P.REQUESTS[3:]
    parsed = read_requests(P.server_info_reads(before, window), "server_info.jsonl")
    assert [r.status for r in parsed.requests] == ["cumulative", "cumulative"]
    assert all(r.accept_length is None for r in parsed.requests)  # a cumulative average is not a window's
    assert close(parsed.window.accept_length, P.truth(window)["pooled_accept_length"])
    counted = read_requests(P.server_info_reads(before, window, sums=False), "server_info.jsonl")
    assert close(counted.window.accept_length, P.truth(window)["pooled_accept_length"])
    one = read_requests(P.server_info_reads(before, window).splitlines()[1], "one.json")
    assert one.window is None and one.requests[0].status == "cumulative"


@pytest.mark.parametrize(
    "text, where",
    [
        ("not json\n", "line 1: not JSON"),
        ('{"a": 1}\n{"a": 2}\n', "line 1: no speculative-decoding statistics"),
        ("[1, 2]", "record 1: a int"),
    ],
)
def test_garbage_names_the_file_and_the_record(text, where):
    with pytest.raises(BadInput, match=f"^bad.jsonl: {where}"):
        read_requests(text, "bad.jsonl")


def edit(text: str, line: int, change) -> str:
    lines = text.splitlines()
    record = json.loads(lines[line])
    change(record)
    lines[line] = json.dumps(record)
    return "\n".join(lines)


def spec(record):
    return record["metrics"]["speculative_decoding"]


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda r: spec(r).update(num_spec_steps="3"), r'num_spec_steps is "3", expected an integer'),
        (lambda r: spec(r).update(num_accepted_draft_tokens=-1), "num_accepted_draft_tokens is -1"),
        (lambda r: spec(r).update(num_spec_steps=5), "sums to 3 steps but the verify step count is 5"),
        (
            lambda r: spec(r).update(acceptance_histogram=[2, 1, 0, 0, 0]),
            "has 5 entries, vLLM writes K\\+1 = 4",
        ),
        (
            lambda r: spec(r).update(acceptance_histogram=[1, 1, 1]),
            "by_draft_length does not sum to acceptance_histogram",
        ),
        (
            lambda r: spec(r).update(mean_acceptance_length=2.9),
            "mean_acceptance_length is 2.9 but the counts",
        ),
        (lambda r: spec(r).update(acceptance_histogram={"x": 1}), "key that is not an integer"),
        (lambda r: r["metrics"].update(speculative_decoding=[1]), "is list, expected a JSON object"),
    ],
)
def test_hostile_vllm_records_are_refused_with_their_line(change, reason):
    with pytest.raises(BadInput, match=f"^v.jsonl: line 1: .*{reason}"):
        read_requests(edit(P.vllm(), 0, change), "v.jsonl")


def test_hostile_sglang_and_trtllm_and_llamacpp_counts():
    def hist(r):
        r["response"]["meta_info"]["spec_correct_drafts_histogram"] = [5, 1]

    with pytest.raises(BadInput, match="s.jsonl: line 1: the accept histogram sums to 6 steps"):
        read_requests(edit(P.sglang(), 0, hist), "s.jsonl")

    def steps(r):
        r["choices"][0]["speculative_decoding"]["num_spec_steps"] = -2

    with pytest.raises(BadInput, match="t.jsonl: line 2: .*num_spec_steps is -2"):
        read_requests(edit(P.trtllm(), 1, steps), "t.jsonl")

    def accepted(r):
        r["response"]["timings"]["draft_n_accepted"] = 99

    with pytest.raises(BadInput, match="l.jsonl: line 1: timings.draft_n_accepted 99 > timings.draft_n 9"):
        read_requests(edit(P.llamacpp(), 0, accepted), "l.jsonl")


def test_a_file_that_mixes_engines_or_contradicts_k_is_refused():
    mixed = P.vllm(n_gt_1=False, stream_last=False) + P.trtllm()
    with pytest.raises(BadInput, match="line 6: is trtllm, but the file is vllm"):
        read_requests(mixed, "mixed.jsonl")
    with pytest.raises(BadInput, match="the engine says K = 3, --num-speculative-tokens says 4"):
        read_requests(P.vllm(), "v.jsonl", num_speculative_tokens=4)
    with pytest.raises(BadInput, match="profile.json: the document: mean_accept_length is 9"):
        read_requests(
            P.modelopt().replace('"mean_accept_length": 2.5', '"mean_accept_length": 9'), "profile.json"
        )


@pytest.mark.parametrize("body", ["data: [DONE]\n", ": keep-alive\n\n", "5\n", "[1, 2]\n"])
def test_a_file_with_no_response_is_bad_input_naming_the_file(tmp_path, body):
    """A stream's terminator alone, comments alone, or JSON that is no response object: one line
    naming the file (it was an IndexError for the first two)."""
    from backend import BadInput
    from backend.data.per_request import read_requests

    path = tmp_path / "empty.jsonl"
    path.write_text(body)
    with pytest.raises(BadInput, match="empty.jsonl"):
        read_requests(path.read_text(), str(path))
