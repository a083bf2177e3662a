"""Parsers of what the engines report, on texts in the formats of released versions (the templates
of SGLang's Scheduler.log_decode_stats / scheduler_metrics_mixin.py and vLLM's
vllm/v1/spec_decode/metrics.py SpecDecodingProm, read in the released packages; see
docs/reference.md §11). Numbers in the example files are made up; the layouts are the versions'."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "support" / "serving"


@pytest.mark.parametrize(
    "name, accept_length, rate, rewritten",
    [
        ("sglang_0.4.3.log", 1.90, None, False),  # "Decode batch. ... accept len: ..." with " TP0" stamps
        ("sglang_0.4.6.post5.log", 1.90, None, True),  # adds "cuda graph"; the topk-1 rewrite notice
        ("sglang_0.5.12.log", 1.895, 0.895, True),  # "Decode batch," and "accept rate"
    ],
)
def test_sglang_logs_of_three_versions(name, accept_length, rate, rewritten):
    from backend.data.serving import parse_sglang_log

    observation = parse_sglang_log((EXAMPLES / name).read_text(), name)
    assert observation.engine == "sglang" and observation.accept_length == pytest.approx(
        accept_length, abs=1e-9
    )
    assert observation.acceptance_rate == (None if rate is None else pytest.approx(rate, abs=1e-9))
    assert observation.throughput == pytest.approx(56.7, abs=0.2) and observation.samples >= 2
    settings = observation.settings  # the dump after SGLang's rewrite: steps 1, topk 1, draft tokens 2
    assert (settings["speculative_num_steps"], settings["speculative_eagle_topk"]) == (1, 1)
    assert settings["speculative_num_draft_tokens"] == 2 and settings["speculative_algorithm"] == "EAGLE"
    assert (
        bool(observation.rewrites) == rewritten and observation.window["first"] <= observation.window["last"]
    )


def test_newer_sglang_layouts_parse():
    from backend.data.serving import parse_sglang_log

    text = (
        "[2025-10-01 10:00:00] server_args={'speculative_algorithm': 'EAGLE3', 'speculative_num_steps': 3, "
        "'speculative_eagle_topk': 1, 'speculative_num_draft_tokens': 4}\n"
        "[2025-10-01 10:00:05] Decode batch [7], #running-req: 1, #token: 9, token usage: 0.00, accept len: 2.50, "
        "accept rate: 0.50, cuda graph: True, gen throughput (token/s): 80.00, #queue-req: 0, \n"
    )
    observation = parse_sglang_log(text, "0.5.4 / 0.5.23 layouts")
    assert observation.accept_length == 2.5 and observation.settings["speculative_num_steps"] == 3


@pytest.mark.parametrize(
    "name, version, per_position",
    [("vllm_0.11.0_metrics.txt", "V1 engine", [0.9]), ("vllm_0.33.0_metrics.txt", "V1 engine", [0.9])],
)
def test_vllm_v1_metrics(name, version, per_position):
    from backend.data.serving import parse_vllm_metrics

    observation = parse_vllm_metrics([((EXAMPLES / name).read_text(), name)])
    # 1 + accepted / drafts, per position accepted_i / drafts (the _created series are ignored)
    assert observation.accept_length == pytest.approx(1.9) and observation.per_position == per_position
    assert observation.version == version and observation.settings == {"num_speculative_tokens": 1}


def test_vllm_v0_metrics_need_k_and_two_scrapes_subtract():
    from backend import BadInput
    from backend.data.serving import parse_vllm_metrics

    text = (EXAMPLES / "vllm_0.6.3_metrics.txt").read_text()
    without_k = parse_vllm_metrics([(text, "v0")])
    assert without_k.accept_length is None and without_k.acceptance_rate == pytest.approx(0.9)
    assert parse_vllm_metrics([(text, "v0")], num_speculative_tokens=1).accept_length == pytest.approx(1.9)
    later = (EXAMPLES / "vllm_0.11.0_metrics.txt").read_text()
    earlier = later.replace("} 1000.0", "} 400.0").replace("} 900.0", "} 300.0")
    window = parse_vllm_metrics([(earlier, "earlier"), (later, "later")])
    assert window.accept_length == pytest.approx(1 + 600 / 600) and window.samples == 600
    with pytest.raises(BadInput, match="counters went down"):
        parse_vllm_metrics([(later, "later"), (earlier, "earlier")])


@pytest.mark.parametrize(
    "text, reason",
    [
        ("hello world\nnot a log\n", "no SGLang line"),
        ("[2025-01-01 00:00:00] server_args=ServerArgs(speculative_num_steps=1)\n", "no decode-batch line"),
    ],
)
def test_garbage_and_truncated_sglang_logs_are_bad_input(text, reason):
    from backend import BadInput
    from backend.data.serving import parse_sglang_log

    with pytest.raises(BadInput, match=reason):
        parse_sglang_log(text, "log.txt")


def test_garbage_metrics_are_bad_input():
    from backend import BadInput
    from backend.data.serving import parse_vllm_metrics

    with pytest.raises(BadInput, match="not a Prometheus exposition"):
        parse_vllm_metrics([("{json: 1}\n", "x")])
    with pytest.raises(BadInput, match="no vllm:spec_decode"):
        parse_vllm_metrics([("vllm:num_requests_running 1\n", "x")])


@pytest.mark.parametrize("value", ["-5", "NaN", "1e999"])
def test_a_counter_that_is_negative_or_not_finite_is_bad_input(value):
    from backend import BadInput
    from backend.data.serving import parse_vllm_metrics

    with pytest.raises(BadInput, match="a counter is finite and >= 0"):
        parse_vllm_metrics([(f"vllm:spec_decode_num_drafts_total {value}\n", "metrics.txt")])
