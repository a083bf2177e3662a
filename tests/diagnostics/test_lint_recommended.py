"""The lint's one recommended command (issue 43 row 3): the user's command with every fix the findings
make on the command line applied, the rest kept word for word, and linting it again finds nothing left
to change there."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.support.lint import make_draft, make_lint_target, sglang


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("recommended")
    return make_lint_target(root / "target"), make_draft(root, "good", aux_ids=[1, 15, 28])


def lint(draft, target, **kwargs):
    from backend.diagnostics.lint import lint_command

    return lint_command(draft, target_dir=target, **kwargs).result().to_dict()


def chain_fixes(report) -> set[str]:
    return {f["code"] for f in report["findings"] if "--speculative-num-steps" in (f["fix"] or "")}


@pytest.mark.parametrize("k", [3, 6])
def test_the_seed_command_gets_one_command_with_the_what_if_k(pair, k):
    target, draft = pair
    command = "SGLANG_SIMULATE_ACC_LEN=3 " + sglang(
        draft,
        "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 16",
        "--speculative-token-map map.pt",
        target=target,
    ).replace("EAGLE3", "EAGLE")
    report = lint(draft, target, sglang=command, chain_k=(k, "the what-if's best K"))
    recommended = report["recommended_command"]
    chain = f"--speculative-num-steps {k} --speculative-eagle-topk 1 --speculative-num-draft-tokens {k + 1}"
    assert chain in recommended and "--speculative-algorithm EAGLE3" in recommended
    assert "SGLANG_SIMULATE_ACC_LEN" not in recommended and "--speculative-token-map" not in recommended
    assert f"{chain} --tp 1 --mem-fraction-static 0.8" in recommended  # untouched words stay in place
    assert recommended.endswith("--context-length 2048")  # absent flags come last (the draft's context)
    assert {"topk1-draft-tokens-reset", "single-draft-step"} <= chain_fixes(report)
    for finding in report["findings"]:  # every chain fix names the chain the command runs
        if finding["code"] in chain_fixes(report):
            assert chain in finding["fix"], finding
    again = lint(draft, target, sglang=recommended, chain_k=(k, "the what-if's best K"))
    assert again["recommended_command"] is None and again["errors"] == 0, again["findings"]


def test_vllm_arguments_get_their_config_fixed_in_place(pair):
    target, draft = pair
    spec = {"method": "eagle", "model": str(draft), "num_speculative_tokens_per_batch_size": {"1": 3}}
    arguments = f"vllm serve {target} --max_model_len 99999 --speculative-config '{json.dumps(spec)}'"
    report = lint(draft, target, vllm=arguments)
    words = shlex.split(report["recommended_command"])
    fixed = json.loads(words[words.index("--speculative-config") + 1])
    assert fixed == {"method": "eagle3", "model": str(draft), "num_speculative_tokens": 3}
    assert "--max_model_len" not in words and words[words.index("--max-model-len") + 1] == "2048"
    assert {
        "eagle-algorithm-eagle3-draft",
        "no-speculative-tokens",
        "k-varies-with-load",
        "draft-context",
    } <= set(report["recommended_applies"])
    again = lint(draft, target, vllm=report["recommended_command"])
    assert again["recommended_command"] is None
    assert report["recommended_leaves"] == again["recommended_leaves"] == ["aux-ids-field"]  # config.json's


def test_a_command_with_nothing_to_change_has_no_recommendation(pair):
    target, draft = pair
    command = sglang(
        draft,
        "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
        "--context-length 2048",
        target=target,
    )
    report = lint(draft, target, sglang=command)
    assert report["recommended_command"] is None and report["recommended_applies"] == []


def test_fixes_outside_the_command_are_named_not_applied(tmp_path):
    """A draft whose d2t is missing: no flag fixes that, so the recommendation says it is left."""
    target = make_lint_target(tmp_path / "target")
    draft = make_draft(tmp_path, "no_d2t", aux_ids=[1, 15, 28], drop=("d2t", "t2d"))
    command = sglang(draft, "--speculative-num-steps 1", target=target)
    report = lint(draft, target, sglang=command)
    assert "missing-d2t" in report["recommended_leaves"]
    assert "missing-d2t" not in report["recommended_applies"] and report["recommended_command"]
