"""The replay-against-vLLM check without a server: how per-step counts are compared and named, what the
CLI refuses before anything loads, and the serving fix preflight writes (its effect on a running vLLM is
tests/real_engine/test_vllm.py)."""

from __future__ import annotations

import json
from dataclasses import replace

from backend.drafts.reading_fixes import wiring_fix
from backend.run.request import ReplayRequest
from backend.service.engine_check import EngineCheckSettings, compare, first_difference, summarise
from backend.service.engine_check_result import (
    DEFINITION,
    EngineCheck,
    ServerLaunch,
    StepDifference,
    WiringExplanation,
)
from backend.service.served_engines import ServedAnswer
from tests.support.cli import cli_json, run_cli

TOY = ("--target", "demo/target", "--draft", "demo/drafts/final")


def test_first_difference_names_the_first_unequal_step_or_a_length_mismatch():
    assert first_difference([1, 0, 3], [1, 0, 3]) is None
    assert first_difference([1, 0, 3], [1, 2, 3]) == 1
    assert first_difference([1, 0], [1, 0, 2]) == 2  # one ran a step more
    assert first_difference([], []) is None


def test_compare_reports_both_counts_at_the_first_difference():
    served = ServedAnswer(per_step=[2, 1, 0], accept_length=2.0, token_ids=[5, 6, 7, 8, 9, 10])
    replayed = {"per_step": [2, 0, 1], "accept_length": 2.0, "output_ids": [5, 6, 7, 8, 9, 10], "run_id": 3}
    row = compare(0, [1, 2], served, replayed)
    assert not row.equal_step_for_step and row.same_tokens
    assert row.first_difference == StepDifference(step=1, served=1, replay=0)
    row = compare(1, [1, 2], served, {**replayed, "per_step": [2, 1, 0]})
    assert row.equal_step_for_step and row.first_difference is None


def test_a_check_reads_back_from_the_json_it_keeps():
    """result.json and `serve-check --json` are EngineCheck.to_dict(): the same check reads back."""
    served = ServedAnswer(per_step=[2, 1, 0], accept_length=2.0, token_ids=[5, 6, 7])
    replayed = {
        "per_step": [2, 0, 1],
        "accept_length": 2.0,
        "output_ids": [5, 6, 8],
        "run_id": 3,
        "wiring": [2, 6, 9],
    }
    rows = [
        compare(0, [1, 2], served, replayed),
        compare(1, [1, 2], served, {**replayed, "per_step": [2, 1, 0]}),
    ]
    settings = EngineCheckSettings(
        ReplayRequest(
            "demo/target",
            "demo/drafts/final",
            prompt_ids=(1, 2),
            num_steps=3,
            max_new_tokens=16,
            engine="vllm",
        )
    )
    start = EngineCheck("vllm", "http://127.0.0.1:8000", None, "vllm", 3, 16, [], DEFINITION, "checks/1")
    result = replace(
        summarise(start, rows, settings),
        explained_by=WiringExplanation([1, 5, 8], "the replayed wiring shifted -1 layer"),
        launched=ServerLaunch(["vllm", "serve"], 41.5, "server.log", aux_layers_line="[x] auxiliary layers"),
    )
    assert result.equal_prompts == 1 and result.wiring == [2, 6, 9] and "on 1/2 prompts" in result.headline
    assert EngineCheck.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_serve_check_refuses_a_missing_server_or_vllm_in_one_line():
    base = ("serve-check", *TOY, "--samples", "demo/data/eval.jsonl")
    for args, said in (
        (("--launch",), "--launch with --engine vllm"),
        ((), "give --url URL"),
        (("--engine", "vllm", "--launch", "--url", "http://127.0.0.1:1"), "give --url URL"),
        (("--engine", "vllm", "--launch", "--vllm-python", "/nonexistent/python"), "/nonexistent/python"),
    ):
        done = run_cli(*base, *args)
        assert done.returncode == 2, (args, done.stderr[-500:])
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0] and "Traceback" not in done.stderr, (args, lines)


def test_preflight_names_vllms_wiring_and_writes_the_fix_both_runners_read(tmp_path):
    # the toy final is a SpecForge draft: nested [1, 5, 8] = HF [2, 6, 9]
    report = cli_json("preflight", *TOY, "--engine", "vllm", "--write-fix", str(tmp_path / "fixed"))
    fixes = {f["engine"]: f for f in report["serving_fixes"]}
    assert fixes["vllm"]["fed"] == [1, 5, 8] and fixes["vllm"]["trained"] == [2, 6, 9]
    assert "vllm-v2" not in fixes and "sglang" not in fixes  # the V2 runner's default is [2, 6, 9] here
    config = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, 6, 9]
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 5, 8]  # SGLang's, kept
    fixed = cli_json("preflight", "--target", "demo/target", "--draft", str(tmp_path / "fixed"))
    assert fixed["serving_fixes"] == []
    assert {e: v["aux_hf_indices"] for e, v in fixed["engines"].items() if e != "eagle"} == dict.fromkeys(
        ("sglang", "vllm", "vllm-v2", "llamacpp", "specforge", "speculators"), [2, 6, 9]
    )
    again = run_cli("preflight", *TOY, "--engine", "vllm", "--write-fix", str(tmp_path / "fixed"))
    assert again.returncode == 2 and "not empty" in again.stderr


def test_apply_the_fix_and_measure_again(tmp_path, monkeypatch):
    """Issue 65 row 18: `preflight --write-fix OUT --measure SAMPLES` replays the draft and the fixed copy
    on the same samples read as the engine the fix is for, both stored as runs, before and after."""
    from backend.defaults import DEMO_EVAL
    from backend.service.runs import get_run

    db_url = f"sqlite:///{tmp_path / 'fix.db'}"
    monkeypatch.setenv("SPECLENS_DB_URL", db_url)
    fixed = tmp_path / "fixed"
    report = cli_json(
        "preflight", *TOY, "--engine", "vllm", "--write-fix", str(fixed), "--measure", str(DEMO_EVAL),
        "--measure-limit", "2",
    )  # fmt: skip
    measured = report["fixed_draft"]["measured"]
    assert measured["engine"] == "vllm" and measured["samples"] == 2 and measured["fixed"] == str(fixed)
    assert None not in (measured["before"], measured["after"]) and measured["before"] != measured["after"]
    before = [get_run(db_url, r) for r in measured["runs_before"]]
    after = [get_run(db_url, r) for r in measured["runs_after"]]
    assert {tuple(r.aux_hf_indices) for r in before} == {(1, 5, 8)}  # what vLLM feeds the draft as it is
    assert {tuple(r.aux_hf_indices) for r in after} == {(2, 6, 9)} and {r.draft_path for r in after} == {
        str(fixed)
    }
    assert f"--draft {fixed}" in measured["relaunch"] and str(DEMO_EVAL) in measured["relaunch"]
    alone = run_cli("preflight", *TOY, "--engine", "vllm", "--measure", str(DEMO_EVAL))
    assert alone.returncode == 2 and "goes with --write-fix" in alone.stderr and alone.stderr.count("\n") == 1


def test_the_sglang_fix_is_written_in_output_of_layer_ids():
    words, keys = wiring_fix("sglang", [2, 15, 27])
    assert keys == {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 14, 26]}} and "HF - 1" in words
    assert wiring_fix("vllm", [2, 15, 27])[1] == {"eagle_aux_hidden_state_layer_ids": [2, 15, 27]}
