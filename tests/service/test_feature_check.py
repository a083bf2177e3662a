"""serve-check --features (issue 42): the features SGLang returned, slot by slot against the target's
layers, on payloads built from a known truth in SGLang's layout (sglang#28496's and the older one)."""

from __future__ import annotations

import json

import pytest

PROMPTS = [[1, 5, 9, 3, 7, 2], [4, 8, 15, 16, 23, 42, 7]]


@pytest.fixture(scope="module")
def demo():
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.drafts.readings import reading_of
    from backend.service import models

    target, draft, _ = models.pair(str(DEMO_TARGET), str(DEMO_DRAFTS / "final"))
    trained = list(reading_of("auto", None, draft, target.num_layers)[0].wiring.aux_hf_indices)
    yield target, str(DEMO_TARGET), str(DEMO_DRAFTS / "final"), trained
    models.forget()


def check(demo, fed_of, layout="fixed"):
    from backend.service.feature_check import feature_check
    from tests.support.sglang_features import response

    target, target_path, draft_path, trained = demo
    responses = [response(target, p, fed_of(trained, n), layout=layout) for n, p in enumerate(PROMPTS)]
    return feature_check(target_path, draft_path, responses), trained


def test_features_fed_as_trained_match_slot_for_slot(demo):
    from backend.service.feature_check import FeatureCheck

    result, trained = check(demo, lambda t, n: t)
    assert result.fed_as_trained and [s.best for s in result.slots] == trained
    assert all(s.cosine > 0.999 and abs(s.norm_ratio - 1) < 0.01 for s in result.slots)
    rows = sum(r.rows_compared for r in result.requests)
    assert all(len(s.top[0].per_token) == rows for s in result.slots)  # a cosine per token
    assert {r.layout for r in result.requests} == {"sglang>=28496"}
    assert result.note is None
    written = result.to_dict()  # the CLI's --json
    assert (
        FeatureCheck.from_dict(written).to_dict() == written and written["slots"][0]["runner_up"]["hf_index"]
    )


@pytest.mark.parametrize("layout", ["fixed", "older"])
def test_a_shifted_slot_is_named_with_its_layer(demo, layout):
    result, trained = check(demo, lambda t, n: [t[0] - 1, *t[1:]], layout)
    assert not result.fed_as_trained
    assert f"slot 0 matches HF {trained[0] - 1}, not the trained HF {trained[0]}" in result.verdict
    assert [s.best for s in result.slots][1:] == trained[1:]
    if layout == "older":
        (first, second) = result.requests
        assert first.layout.startswith("older (prefill rows only") and first.rows_compared == len(PROMPTS[0])


def test_rows_of_another_request_are_said(demo):
    from backend.service.feature_check import feature_check
    from tests.support.sglang_features import response

    target, target_path, draft_path, trained = demo
    good = response(target, PROMPTS[0], trained)
    swapped = response(target, PROMPTS[1], trained)
    other = response(target, [3, 3, 9, 12, 1, 2, 5], trained)  # same lengths, another prompt's rows
    swapped["meta_info"]["hidden_states"] = other["meta_info"]["hidden_states"]
    swapped["output_ids"] = swapped["output_ids"][: len(other["output_ids"])]
    result = feature_check(target_path, draft_path, [good, good, swapped])
    assert result.disagreeing_requests == [3] and "sglang#26163" in result.note


def test_bad_payloads_are_refused_with_one_line(demo, tmp_path):
    from backend import BadInput
    from backend.service.feature_check import feature_check, read_responses

    _, target_path, draft_path, _ = demo
    with pytest.raises(BadInput, match="--enable-return-hidden-states"):
        feature_check(target_path, draft_path, [{"output_ids": [1], "meta_info": {}, "input_ids": [1]}])
    with pytest.raises(BadInput, match="give --samples"):
        feature_check(target_path, draft_path, [{"output_ids": [1], "meta_info": {"hidden_states": [[0.0]]}}])
    with pytest.raises(BadInput, match="prefill entry has 1 rows for a prompt of 2"):
        feature_check(
            target_path,
            draft_path,
            [{"output_ids": [1], "meta_info": {"hidden_states": [[0.0]]}, "input_ids": [1, 2]}],
        )
    bad_ids = {"output_ids": [1, 10**9], "meta_info": {"hidden_states": [[0.0]]}, "input_ids": [1]}
    with pytest.raises(BadInput, match="response 1: output_ids hold ids outside the target's vocabulary"):
        feature_check(target_path, draft_path, [bad_ids])
    (tmp_path / "r.jsonl").write_text("{}\nnot json\n")
    with pytest.raises(BadInput, match="line 2 is not JSON"):
        read_responses(tmp_path / "r.jsonl")


@pytest.mark.slow
def test_the_cli_names_the_slot_and_the_layer(demo, tmp_path):
    from tests.support.cli import cli_json, run_cli
    from tests.support.sglang_features import response

    target, target_path, draft_path, trained = demo
    path = tmp_path / "responses.jsonl"
    path.write_text(
        "\n".join(json.dumps(response(target, p, [trained[0] - 1, *trained[1:]])) for p in PROMPTS)
    )
    args = (
        "serve-check",
        "--features",
        "--responses",
        str(path),
        "--target",
        target_path,
        "--draft",
        draft_path,
    )
    result = cli_json(*args)
    assert f"slot 0 matches HF {trained[0] - 1}" in result["verdict"]
    text = run_cli(*args)
    assert text.returncode == 0 and "MISMATCH: slot 0 matches" in text.stdout
    bad = run_cli("serve-check", "--responses", str(path), "--target", target_path, "--draft", draft_path)
    assert bad.returncode == 2 and "--features" in bad.stderr and "Traceback" not in bad.stderr
