"""Serving features that cost acceptance without an error (issue 42): sampling penalties, structured
output, LoRA, prefix caching on hybrid targets, disaggregation. Each from real-looking command
lines and request bodies; the healthy command gets none of them."""

from __future__ import annotations

import json
import shutil

import pytest

from backend import BadInput
from tests.support.lint import CHAIN, make_draft, make_lint_target, sglang

FEATURE_CODES = {"sampling-penalties", "structured-output", "lora", "prefix-cache", "disaggregation"}


def lint_command(*args, **kwargs):
    from backend.diagnostics.lint import lint_command as lint

    return lint(*args, **kwargs)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("features")
    target = make_lint_target(root / "target")
    hybrid = make_lint_target(root / "hybrid")
    config = json.loads((hybrid / "config.json").read_text())
    config["layer_types"] = ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 8
    (hybrid / "config.json").write_text(json.dumps(config))
    return {"target": target, "hybrid": hybrid, "draft": make_draft(root, "d", aux_ids=[1, 15, 28])}


def vllm(draft, extra="", **spec):
    config = json.dumps({"method": "eagle3", "model": str(draft), "num_speculative_tokens": 3, **spec})
    return f"vllm serve m --speculative-config '{config}' {extra}"


def codes(report):
    return {f.code: f for f in report.findings if f.code in FEATURE_CODES}


def test_a_plain_command_and_plain_requests_use_no_feature(setup, tmp_path):
    requests = tmp_path / "plain.jsonl"
    requests.write_text(json.dumps({"prompt": "hi", "temperature": 0, "repetition_penalty": 1.0}) + "\n")
    for report in (
        lint_command(
            setup["draft"], vllm=vllm(setup["draft"]), target_dir=setup["target"], request_file=requests
        ),
        lint_command(setup["draft"], sglang=sglang(setup["draft"], CHAIN), target_dir=setup["target"]),
    ):
        assert codes(report) == {}


def test_penalties_in_requests_or_in_the_served_generation_config(setup, tmp_path):
    bodies = tmp_path / "req.json"
    bodies.write_text(
        json.dumps([{"text": "a", "sampling_params": {"frequency_penalty": 0.5}}, {"text": "b"}])
    )
    report = lint_command(
        setup["draft"], sglang=sglang(setup["draft"], CHAIN), target_dir=setup["target"], request_file=bodies
    )
    finding = codes(report)["sampling-penalties"]
    assert "frequency_penalty=0.5" in finding.message and "1 of 2 requests" in finding.message
    assert "sglang#33643" in finding.message and "diagnose --request" in finding.fix
    # vLLM's --generation-config auto applies the target's generation_config.json to every request
    (setup["target"] / "generation_config.json").write_text(json.dumps({"repetition_penalty": 1.1}))
    try:
        by_default = lint_command(setup["draft"], vllm=vllm(setup["draft"]), target_dir=setup["target"])
        assert "default generation config" in codes(by_default)["sampling-penalties"].message
        neutral = lint_command(
            setup["draft"], vllm=vllm(setup["draft"], "--generation-config vllm"), target_dir=setup["target"]
        )
        assert "sampling-penalties" not in codes(neutral)
    finally:
        (setup["target"] / "generation_config.json").unlink()
    override = vllm(setup["draft"], """--override-generation-config '{"presence_penalty": 0.3}'""")
    report = lint_command(setup["draft"], vllm=override, target_dir=setup["target"])
    assert "presence_penalty=0.3" in codes(report)["sampling-penalties"].message


def test_grammar_and_adapters_in_requests(setup, tmp_path):
    bodies = tmp_path / "req.jsonl"
    bodies.write_text(
        "\n".join(
            json.dumps(b)
            for b in [
                {"messages": [], "response_format": {"type": "json_schema", "json_schema": {}}},
                {"messages": [], "tools": [{"type": "function"}]},
                {"text": "x", "lora_path": "adapter-a"},
                {"messages": []},
            ]
        )
    )
    report = lint_command(
        setup["draft"], sglang=sglang(setup["draft"], CHAIN), target_dir=setup["target"], request_file=bodies
    )
    found = codes(report)
    assert "2 of 4 requests are grammar-constrained" in found["structured-output"].message
    assert "vllm#47885" in found["structured-output"].message
    assert "1 of 4 requests name an adapter" in found["lora"].message


def test_adapters_disaggregation_and_prefix_cache_from_flags(setup):
    draft = setup["draft"]
    assert "lora" in codes(
        lint_command(draft, sglang=sglang(draft, CHAIN + " --enable-lora --lora-paths a=/x"))
    )
    assert "lora" in codes(lint_command(draft, vllm=vllm(draft, "--enable-lora --lora-modules a=/x")))
    decode = codes(lint_command(draft, sglang=sglang(draft, CHAIN + " --disaggregation-mode decode")))
    assert (
        "sglang#7242" in decode["disaggregation"].message and "sglang#10801" in decode["disaggregation"].fix
    )
    consumer = vllm(
        draft, """--kv-transfer-config '{"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}'"""
    )
    assert "disaggregation" in codes(lint_command(draft, vllm=consumer))
    hybrid = codes(lint_command(draft, vllm=vllm(draft), target_dir=setup["hybrid"]))
    assert (
        "vllm#51771" in hybrid["prefix-cache"].message
        and "disable_eagle_block_drop" in hybrid["prefix-cache"].fix
    )
    for off in (vllm(draft, "--no-enable-prefix-caching"), vllm(draft, disable_eagle_block_drop=True)):
        assert "prefix-cache" not in codes(lint_command(draft, vllm=off, target_dir=setup["hybrid"]))
    assert "prefix-cache" not in codes(lint_command(draft, vllm=vllm(draft), target_dir=setup["target"]))


@pytest.mark.parametrize(
    "content, reason",
    [("", "no request body"), ('{"a": 1}\nnot json\n', "line 2 is not JSON"), ("[1, 2]", "request 1 is not")],
)
def test_bad_request_files_are_refused_with_one_line(tmp_path, content, reason):
    from backend.diagnostics.serving_features import read_request_bodies

    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(BadInput, match=reason):
        read_request_bodies(path)
    with pytest.raises(BadInput, match="no such request file"):
        read_request_bodies(tmp_path / "missing.jsonl")


def test_diagnose_classes_for_each_lint_code():
    from backend.diagnostics.diagnose import CLASSES, lint_as_findings

    found = lint_as_findings(
        [{"severity": "warning", "code": c, "message": "m", "fix": "f"} for c in FEATURE_CODES]
    )
    assert {f.cls for f in found} == FEATURE_CODES and FEATURE_CODES <= set(CLASSES)
    assert {f.severity for f in found} == {"warn"}


def test_the_first_step_signature_of_a_bad_hand_off():
    from backend.data.per_request import read_requests
    from tests.support import per_request_payloads as payloads

    healthy = [[2, 1, 3], [3, 2, 2, 3], [1, 2, 2], [2, 3, 1]]
    handed_off = [[0] + r[1:] for r in healthy]
    for requests, signature in ((healthy, None), (handed_off, "disaggregation")):
        parsed = read_requests(payloads.vllm(requests, stream_last=False), "r.jsonl", "auto", None)
        from backend.data.step_signature import first_step_signature

        result = first_step_signature(parsed.requests)
        assert result.signature == signature and result.requests == 4
    assert result.first_step_accepted_mean == 0 and "sglang#7242" in result.message
    few = read_requests(payloads.vllm(handed_off[:2], stream_last=False), "r.jsonl", "auto", None)
    assert first_step_signature(few.requests) is None  # two requests say nothing


@pytest.mark.slow
def test_diagnose_json_names_each_serving_class_on_the_demo_pair(tmp_path):
    """The CLI contract: planted serving cases, each named by `diagnose --json` as its own class."""
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from tests.support.cli import cli_json, run_cli

    draft = DEMO_DRAFTS / "final"
    requests = tmp_path / "requests.jsonl"
    requests.write_text(
        json.dumps({"messages": [], "repetition_penalty": 1.2, "response_format": {"type": "json_object"}})
        + "\n"
        + json.dumps({"text": "x", "lora_path": "a"})
        + "\n"
    )
    base = ("diagnose", "--target", str(DEMO_TARGET), "--draft", str(draft))
    by_request = cli_json(*base, "--request", str(requests))
    named = {f["class"] for f in by_request["findings"] if f["severity"] == "warn"}
    assert {"sampling-penalties", "structured-output", "lora"} <= named, by_request["findings"]
    assert by_request["verdict"] == "suspect"
    command = (
        f"python -m sglang.launch_server --model-path {DEMO_TARGET} --speculative-algorithm EAGLE3 "
        f"--speculative-draft-model-path {draft} {CHAIN} --disaggregation-mode decode"
    )
    by_flags = cli_json(*base, "--sglang", command)
    assert "disaggregation" in {f["class"] for f in by_flags["findings"]}
    hybrid = tmp_path / "hybrid-target"
    shutil.copytree(DEMO_TARGET, hybrid)
    config = json.loads((hybrid / "config.json").read_text())
    config["layer_types"] = ["linear_attention", "linear_attention", "full_attention"] * (
        config["num_hidden_layers"] // 3
    )
    (hybrid / "config.json").write_text(json.dumps(config))
    spec = {
        "method": "eagle3",
        "model": str(draft),
        "num_speculative_tokens": 4,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 3.1,
    }
    served = cli_json(
        "diagnose",
        "--target",
        str(hybrid),
        "--draft",
        str(draft),
        "--vllm",
        f"vllm serve {hybrid} --speculative-config '{json.dumps(spec)}'",
    )
    (cache,) = [f for f in served["findings"] if f["class"] == "prefix-cache"]
    assert cache["severity"] == "warn" and cache["message"].startswith("the target is a hybrid model")
    assert {"fail"} == {f["severity"] for f in served["findings"] if f["class"] == "synthetic-acceptance"}
    bad = run_cli(*base, "--request", str(tmp_path / "missing.jsonl"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "missing.jsonl" in bad.stderr


@pytest.mark.slow
def test_diagnose_measures_what_a_served_penalty_costs(tmp_path):
    """A repetition penalty in the requests: live replays without it, on the target only, on both."""
    from backend.data.samples import read_jsonl
    from backend.defaults import DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET
    from backend.diagnostics.diagnose import DiagnoseOptions
    from backend.service import models
    from backend.service.diagnosis import diagnose

    requests = tmp_path / "requests.json"
    requests.write_text(json.dumps({"prompt": "x", "repetition_penalty": 1.3}))
    samples, _ = read_jsonl(DEMO_EVAL, 2048)
    options = DiagnoseOptions(request_file=str(requests), live_samples=2)
    result = diagnose(str(DEMO_TARGET), str(DEMO_DRAFTS / "final"), samples[:4], options).to_dict()
    models.forget()
    measured = [
        f
        for f in result["findings"]
        if f["class"] == "sampling-penalties" and "accept_length_penalty_on_target" in f["evidence"]
    ]
    (finding,) = measured
    evidence = finding["evidence"]
    assert evidence["accept_length_penalty_on_target"] < evidence["accept_length_penalty_on_both"]
    assert evidence["accept_length_penalty_on_target"] < evidence["accept_length_without_penalty"] - 0.1
    assert finding["severity"] == "warn" and "repetition_penalty=1.3" in finding["message"]
    assert result["checks"]["penalties"] == "ran on 2 samples"


def test_steps_of_several_draft_lengths_say_k_varied():
    """vLLM's per-request blocks: per_step_drafted (or the histogram by draft length) shows K changed."""
    from backend.data.per_request import read_requests
    from backend.data.step_signature import draft_length_signature
    from tests.support import per_request_payloads as payloads

    requests = [[2, 1, 3], [3, 2, 2, 3], [1, 2, 2]]
    text = payloads.vllm(requests, stream_last=False)
    assert draft_length_signature(read_requests(text, "r.jsonl", "auto", None).requests).signature is None
    records = [json.loads(line) for line in text.splitlines()]
    block = records[1]["metrics"]["speculative_decoding"]
    block["per_step_drafted"] = [3, 3, 1, 1]  # K cut to 1 under load for two steps
    block["per_step_accepted"] = [3, 2, 1, 1]
    block["num_draft_tokens"], block["num_accepted_draft_tokens"] = 8, 7
    block["acceptance_histogram"] = [0, 2, 1, 1]
    block["acceptance_histogram_by_draft_length"] = {"3": [0, 0, 1, 1], "1": [0, 2, 0, 0]}
    block["mean_acceptance_length"] = 1 + 7 / 4
    block["draft_acceptance_rate"] = 7 / 8
    parsed = read_requests("\n".join(json.dumps(r) for r in records), "r.jsonl", "auto", None)
    varied = draft_length_signature(parsed.requests)
    assert varied.draft_lengths == [1, 3] and "K changed while serving" in varied.message


def test_penalties_outside_the_engines_range_are_said_refused(setup, tmp_path):
    bodies = tmp_path / "req.json"
    bodies.write_text(json.dumps({"prompt": "x", "frequency_penalty": 9, "repetition_penalty": "1.3"}))
    report = lint_command(
        setup["draft"], vllm=vllm(setup["draft"]), target_dir=setup["target"], request_file=bodies
    )
    finding = codes(report)["sampling-penalties"]
    assert "frequency_penalty=9" in finding.message and "refused" in finding.message
    assert "repetition_penalty" not in finding.message.split(":")[0]  # a string is not a penalty value
