"""The replay held against a running vLLM (its CPU build, `.venv-vllm`, README): per-step accepted
counts equal vLLM's own on every prompt, with the default `vllm` reading and no override.

Pairs: a bigram target built here (head_dim 32: vLLM's CPU attention has no head size 16 or 40) whose
draft reads only the embedding chunk and so accepts only when it is fed HF 0; and the real pair
(SmolLM2-135M-Instruct + demo/smollm2/drafts, `python -m demo.smollm2`). The toy demo pair cannot be
served: its head_dim 40 is refused by vLLM's CPU attention, and the check says so in one line.

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


@pytest.fixture(scope="module")
def bigram(tmp_path_factory) -> dict:
    from backend.engine.synthetic import (
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
    tensors = None
    drafts = {}
    for name, ids in (
        ("right", {"top": TRAINED}),
        ("miswired", {"top": [2, 4, 5]}),
        ("nested", {"nested": [1, 3, 4]}),
    ):
        config = draft_config_dict(model.config, aux_ids=ids.get("nested", [1, 3, 4]))
        if "top" in ids:
            config.pop("eagle_config", None)
            config["eagle_aux_hidden_state_layer_ids"] = ids["top"]
        tensors = tensors or bigram_draft_tensors(model, config, corrupt_next_token_map(follow, 0.2, seed=4))
        drafts[name] = str(save_draft(root / name, config, tensors))
    rng = random.Random(0)
    with (root / "samples.jsonl").open("w") as handle:
        for _ in range(4):
            ids = [rng.randrange(48)]
            for _ in range(11):
                ids.append(follow[ids[-1]])
            handle.write(json.dumps({"input_ids": ids, "loss_mask": [0] * 12, "n_prompt_tokens": 12}) + "\n")
    return {"root": root, "target": str(root / "target"), "samples": str(root / "samples.jsonl"), **drafts}


def check(pair: dict, draft: str, db: str, *extra: str, tokens: int = 32) -> dict:
    return cli_json(
        "serve-check", "--engine", "vllm", "--target", pair["target"], "--draft", draft,
        "--samples", pair["samples"], "--steps", "4", "--max-new-tokens", str(tokens), "--db", db,
        "--timeout", "600", *extra, timeout=1800,
    )  # fmt: skip


def assert_reproduced(result: dict) -> None:
    rows = result["rows"]
    assert rows and all(r["equal_step_for_step"] for r in rows), [
        (r["prompt"], r["first_difference"]) for r in rows
    ]
    assert all(r["same_tokens"] for r in rows)
    assert result["headline"].startswith(f"the replay reproduces this vLLM on {len(rows)}/{len(rows)}")


def test_the_default_reading_reproduces_vllm_and_a_wrong_one_is_named(bigram, tmp_path):
    db = f"sqlite:///{tmp_path}/c.db"
    with launched_server(bigram["target"], bigram["right"], 4, tmp_path / "server.log") as server:
        right = check(bigram, bigram["right"], db, "--url", server.url)
        assert_reproduced(right)
        assert right["wiring"] == TRAINED and min(r["served_accept_length"] for r in right["rows"]) > 1.5
        # replayed on the wrong wiring, the check finds the one vLLM ran
        wrong = check(bigram, bigram["right"], db, "--url", server.url, "--aux-hf-indices", "2,4,5")
        assert wrong["equal_prompts"] < len(wrong["rows"])
        assert wrong["explained_by"]["aux_hf_indices"] == TRAINED, wrong["explained_by"]
        assert "vLLM ran HF [0, 2, 4]" in wrong["headline"]
    assert server.log_lines("auxiliary layers from speculative config: (0, 2, 4)")
    saved = Path(right["folder"]) / "responses.jsonl"
    observed = cli_json("observe", "--requests", str(saved), "--db", db)
    assert [r["accept_length"] for r in observed["requests"]] == [
        r["served_accept_length"] for r in right["rows"]
    ]
    assert [r["engine_accept_length"] for r in observed["requests"]] == [
        r["accept_length"] for r in observed["requests"]
    ]


def test_vllm_reads_nested_ids_as_hf_indices_on_the_cpu_build(bigram, tmp_path):
    result = check(bigram, bigram["nested"], f"sqlite:///{tmp_path}/c.db", "--launch")
    assert_reproduced(result)
    assert result["wiring"] == [1, 3, 4]  # SGLang would feed HF [2, 4, 5]
    assert "(1, 3, 4)" in result["launched"]["aux_layers_line"]


def test_the_written_fix_is_what_vllm_then_runs(bigram, tmp_path):
    db = f"sqlite:///{tmp_path}/c.db"
    before = check(bigram, bigram["miswired"], db, "--launch")
    assert_reproduced(before)  # vLLM runs the declared defaults, the replay too
    fixed = tmp_path / "fixed"
    report = cli_json(
        "preflight", "--target", bigram["target"], "--draft", bigram["miswired"], "--engine", "vllm",
        "--aux-hf-indices", "0,2,4", "--write-fix", str(fixed),
    )  # fmt: skip
    assert report["fixed_draft"]["config_update"] == {"eagle_aux_hidden_state_layer_ids": TRAINED}
    after = check(bigram, str(fixed), db, "--launch")
    assert_reproduced(after)
    assert after["wiring"] == TRAINED
    mean = lambda r: sum(x["served_accept_length"] for x in r["rows"]) / len(r["rows"])  # noqa: E731
    assert mean(after) > mean(before) + 0.5, (mean(before), mean(after))


def test_a_pair_vllm_cannot_serve_is_refused_in_one_line(tmp_path):
    done = run_cli(
        "serve-check", "--engine", "vllm", "--launch", "--target", "demo/target", "--draft", "demo/drafts/final",
        "--samples", "demo/data/eval.jsonl", "--limit", "1", "--db", f"sqlite:///{tmp_path}/c.db", timeout=1200,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "head_dim=40" in lines[-1] and "vLLM" in lines[-1], lines[-3:]


@pytest.mark.skipif(
    not (REAL / "target" / "model.safetensors").is_file() and os.environ.get("SPECLENS_REQUIRE_VLLM") != "1",
    reason="the real target is not converted (python -m demo.smollm2)",
)
@pytest.mark.parametrize("draft", ["final", "miswired"])
def test_the_real_pair_is_reproduced_step_for_step(draft, tmp_path):
    pair = {"target": str(REAL / "target"), "samples": str(REAL / "data" / "eval.jsonl")}
    result = check(
        pair,
        str(REAL / "drafts" / draft),
        f"sqlite:///{tmp_path}/c.db",
        "--launch",
        "--limit",
        "8",
        tokens=96,
    )
    assert_reproduced(result)
    assert result["wiring"] == [1, 14, 26]  # nested [1, 14, 26] (SpecForge) read as HF indices
