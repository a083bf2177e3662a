"""The replay held against a running vLLM (its CPU build, `.venv-vllm`, README): per-step accepted
counts equal vLLM's own on every prompt, with the default `vllm` reading and no override.

Pairs: a bigram target built here (head_dim 32: vLLM's CPU attention has no head size 16 or 40) whose
draft reads only the embedding chunk and so accepts only when it is fed HF 0; and the real pair
(SmolLM2-135M-Instruct + demo/smollm2/drafts, `python -m demo.smollm2`). The toy demo pair cannot be
served: its head_dim 40 is refused by vLLM's CPU attention, and the check says so in one line.

A vLLM start costs 35 to 45 s on two cores (measured here), so each served draft has one server for the whole
session (the fixtures below) and every check talks to it with `--url`; `--launch` is tested once, on the
written fix, which must be a new server anyway. The CLI runs in this process (tests/support/cli.py). The
module is one file, so one xdist worker (`--dist loadfile`): its servers are never started twice.

Without vLLM these tests skip, unless SPECLENS_REQUIRE_VLLM=1 (tests/run.sh sets it after installing it).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from backend.service.vllm_server import DEFAULT_PYTHON, launched_server
from tests.support.cli import cli_json, run_cli
from tests.support.engines import assert_reproduced

pytestmark = pytest.mark.slow
HAVE_VLLM = Path(os.environ.get("SPECLENS_VLLM_PYTHON") or DEFAULT_PYTHON).is_file()
if not HAVE_VLLM:
    if os.environ.get("SPECLENS_REQUIRE_VLLM") == "1":
        raise RuntimeError(
            f"SPECLENS_REQUIRE_VLLM=1 but {DEFAULT_PYTHON} is missing (README: the vLLM install)"
        )
    pytest.skip("vLLM's CPU build is not installed (.venv-vllm)", allow_module_level=True)

REAL = Path("demo/smollm2")
TRAINED = [0, 2, 4]  # the bigram draft's fc reads chunk 0: it accepts only when chunk 0 is HF 0
NESTED = [1, 3, 4]  # SpecForge's nested ids of the draft served below: vLLM feeds them as HF indices


@pytest.fixture(scope="module")
def bigram(tmp_path_factory) -> dict:
    """The bigram target, a draft trained on HF [0, 2, 4] whose config declares nested ids [1, 3, 4]
    (SpecForge's layout), and four prompts that follow the target's bigram map."""
    from tests.support.synthetic import (
        TargetShape,
        bigram_draft_tensors,
        corrupt_next_token_map,
        cyclic_next_token_map,
        draft_config_dict,
        make_bigram_target,
        save_draft,
    )

    root = tmp_path_factory.mktemp("vllm-bigram")
    follow = cyclic_next_token_map(48, seed=3)
    shape = TargetShape(num_layers=8, hidden=64, heads=2, kv_heads=1, intermediate=96)
    model = make_bigram_target(root / "target", follow, shape)
    config = draft_config_dict(model.config, aux_ids=NESTED)
    tensors = bigram_draft_tensors(model, config, corrupt_next_token_map(follow, 0.2, seed=4))
    nested = save_draft(root / "nested", config, tensors)
    rng = random.Random(0)
    with (root / "samples.jsonl").open("w") as handle:
        for _ in range(4):
            ids = [rng.randrange(48)]
            for _ in range(11):
                ids.append(follow[ids[-1]])
            handle.write(json.dumps({"input_ids": ids, "loss_mask": [0] * 12, "n_prompt_tokens": 12}) + "\n")
    return {
        "root": root,
        "target": str(root / "target"),
        "samples": str(root / "samples.jsonl"),
        "nested": str(nested),
    }


@pytest.fixture(scope="module")
def nested_server(bigram):
    """vLLM serving the nested-ids draft, once for the module."""
    with launched_server(
        bigram["target"], bigram["nested"], 4, bigram["root"] / "nested-server.log"
    ) as server:
        yield server


@pytest.fixture(scope="module")
def nested_check(bigram, nested_server, tmp_path_factory) -> dict:
    """The default reading's check against that server (the tests below read it, none repeats it)."""
    db = f"sqlite:///{tmp_path_factory.mktemp('nested-check')}/c.db"
    return {"db": db, "result": check(bigram, bigram["nested"], db, "--url", nested_server.url)}


def check(pair: dict, draft: str, db: str, *extra: str, tokens: int = 32) -> dict:
    return cli_json(
        "serve-check", "--engine", "vllm", "--target", pair["target"], "--draft", draft,
        "--samples", pair["samples"], "--steps", "4", "--max-new-tokens", str(tokens), "--db", db,
        "--timeout", "600", *extra,
    )  # fmt: skip


def mean_served(result: dict) -> float:
    return sum(r["served_accept_length"] for r in result["rows"]) / len(result["rows"])


def test_vllm_reads_nested_ids_as_hf_indices_and_a_wrong_reading_is_named(
    bigram, nested_server, nested_check
):
    result = nested_check["result"]
    assert_reproduced(result, "vLLM")
    assert result["wiring"] == NESTED  # SGLang would feed HF [2, 4, 5]
    assert nested_server.log_lines("auxiliary layers from speculative config: (1, 3, 4)")
    # replayed on another wiring (the one the draft was trained on), the check finds the one vLLM ran
    wrong = check(
        bigram, bigram["nested"], nested_check["db"], "--url", nested_server.url, "--aux-hf-indices", "0,2,4"
    )
    assert wrong["equal_prompts"] < len(wrong["rows"])
    assert wrong["explained_by"]["aux_hf_indices"] == NESTED, wrong["explained_by"]
    assert "vLLM ran HF [1, 3, 4]" in wrong["headline"]
    saved = Path(result["folder"]) / "responses.jsonl"
    observed = cli_json("observe", "--requests", str(saved), "--db", nested_check["db"])
    assert [r["accept_length"] for r in observed["requests"]] == [
        r["served_accept_length"] for r in result["rows"]
    ]
    assert [r["engine_accept_length"] for r in observed["requests"]] == [
        r["accept_length"] for r in observed["requests"]
    ]


def test_sampled_answers_accept_fewer_drafts_than_agree_with_what_vllm_emitted(
    bigram, nested_server, nested_check
):
    """Sampled requests to the same server, each replayed along the tokens vLLM emitted: vLLM's CPU build
    counts drafts rejected that agree with its own output (docs/engines.md, "Sampled requests"), which
    the check says instead of searching wirings. A vLLM whose sampled verify is a rejection sampler over
    greedy drafts would be reproduced here step for step and fail this test: then the doc is stale."""
    sampled = check(bigram, bigram["nested"], nested_check["db"], "--url", nested_server.url,
                    "--temperature", "0.7", "--seed", "1")  # fmt: skip
    assert sampled["sampling"]["temperature"] == 0.7 and sampled["explained_by"] is None
    assert sampled["equal_prompts"] < len(sampled["rows"]), sampled["headline"]
    assert "rejects drafts it then emits, or drafts otherwise when it samples" in sampled["headline"]


def test_the_written_fix_is_what_a_launched_vllm_then_runs(bigram, nested_check, tmp_path):
    """`--launch` (tested here once): the fix written for the trained wiring, served by a new vLLM, is fed
    HF [0, 2, 4], reproduced step for step, and accepts far more than the declared nested ids."""
    fixed = tmp_path / "fixed"
    report = cli_json(
        "preflight", "--target", bigram["target"], "--draft", bigram["nested"], "--engine", "vllm",
        "--aux-hf-indices", "0,2,4", "--write-fix", str(fixed),
    )  # fmt: skip
    assert report["fixed_draft"]["config_update"] == {"eagle_aux_hidden_state_layer_ids": TRAINED}
    after = check(bigram, str(fixed), nested_check["db"], "--launch")
    assert_reproduced(after, "vLLM")
    assert after["wiring"] == TRAINED and "(0, 2, 4)" in after["launched"]["aux_layers_line"]
    assert min(r["served_accept_length"] for r in after["rows"]) > 1.5
    before = nested_check["result"]
    assert mean_served(after) > mean_served(before) + 0.5, (mean_served(before), mean_served(after))


def test_a_pair_vllm_cannot_serve_is_refused_in_one_line(tmp_path):
    done = run_cli(
        "serve-check", "--engine", "vllm", "--launch", "--target", "demo/target", "--draft", "demo/drafts/final",
        "--samples", "demo/data/eval.jsonl", "--limit", "1", "--db", f"sqlite:///{tmp_path}/c.db",
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "head_dim=40" in lines[-1] and "vLLM" in lines[-1], lines[-3:]


@pytest.mark.skipif(
    not (REAL / "target" / "model.safetensors").is_file() and os.environ.get("SPECLENS_REQUIRE_VLLM") != "1",
    reason="the real target is not converted (python -m demo.smollm2)",
)
def test_the_real_pair_is_reproduced_step_for_step(tmp_path):
    """The real pair's `final` draft, 4 HumanEval prompts x 96 tokens: steps that reject every draft,
    accept some and accept all K, each equal to vLLM's. `miswired` declares the same nested ids, so vLLM
    reads it the same way: serving it too would check the same reading twice."""
    pair = {"target": str(REAL / "target"), "samples": str(REAL / "data" / "eval.jsonl")}
    draft = str(REAL / "drafts" / "final")
    with launched_server(pair["target"], draft, 4, tmp_path / "server.log") as server:
        result = check(
            pair, draft, f"sqlite:///{tmp_path}/c.db", "--url", server.url, "--limit", "4", tokens=96
        )
        # the replay over traces vLLM itself captured (a second vLLM launched with the hidden-states
        # method and SpecLens's CPU connector, every layer): vLLM's own counts again (docs/traces.md)
        traced = check(
            pair, draft, f"sqlite:///{tmp_path}/t.db", "--url", server.url, "--limit", "4", "--via", "trace",
            tokens=96,
        )  # fmt: skip
        # a vLLM that serves EAGLE-3, not the hidden-states method, is no trace source: one line naming it
        refused = run_cli(
            "replay", "--target", pair["target"], "--draft", draft, "--samples", pair["samples"], "--via", "trace",
            "--trace-from", "vllm", "--url", server.url, "--db", f"sqlite:///{tmp_path}/r.db",
        )  # fmt: skip
    said = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f"vLLM at {server.url}, prompt [" in said and "no hidden_states_path" in said, said
    assert_reproduced(traced, "vLLM")
    assert [r["served_per_step"] for r in traced["rows"]] == [r["served_per_step"] for r in result["rows"]]
    kept = list((tmp_path / "artifacts" / "traces").glob("*.safetensors"))
    assert len(kept) == 4, kept
    assert_reproduced(result, "vLLM")
    assert result["wiring"] == [1, 14, 26]  # nested [1, 14, 26] (SpecForge) read as HF indices
    counts = {c for r in result["rows"] for c in r["served_per_step"]}
    assert {0, 4} <= counts and len(counts) >= 4, counts  # rejections, partial and whole acceptances


@pytest.mark.skipif(
    not (REAL / "target" / "model.safetensors").is_file() and os.environ.get("SPECLENS_REQUIRE_VLLM") != "1",
    reason="the real target is not converted (python -m demo.smollm2)",
)
def test_the_dflash_draft_is_reproduced_step_for_step(tmp_path):
    """The bundled DFlash draft served by vLLM's CPU build (method dflash, K = 7 = its block_size - 1; vLLM
    reads dflash_config.target_layer_ids + 1), 2 HumanEval prompts x 64 tokens: every step equal."""
    result = cli_json(
        "serve-check", "--engine", "vllm", "--launch", "--target", str(REAL / "target"),
        "--draft", str(REAL / "drafts" / "dflash"), "--samples", str(REAL / "data" / "eval.jsonl"), "--limit", "2",
        "--steps", "7", "--max-new-tokens", "64", "--db", f"sqlite:///{tmp_path}/d.db", "--timeout", "900",
    )  # fmt: skip
    assert_reproduced(result, "vLLM")
    assert result["wiring"] == [2, 9, 15, 21, 28]
    assert len({c for r in result["rows"] for c in r["served_per_step"]}) >= 3
