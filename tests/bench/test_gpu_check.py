"""The device check runs end to end on the CPU at toy sizes (its numbers are read in bench/, not here)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # a benchmark script's smoke test; exactness has its own fast tests


def test_gpu_check_runs_on_cpu_and_is_exact_in_fp32(tmp_path):
    from bench import gpu_check

    out = tmp_path / "gpu_check.json"
    small = ["--layers", "4", "--hidden", "128", "--vocab", "100", "--new-tokens", "24"]
    eight_b = ["--eight-b", "--eight-b-layers", "4", "--eight-b-hidden", "128", "--eight-b-vocab", "512"]
    split = {f"model.layers.{i}": "disk" if i % 2 else "cpu" for i in range(4)}
    split |= {"model.embed_tokens": "cpu", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    dispatch = ["--device-map", json.dumps(split)]  # a forced split: half the layers offloaded to disk
    code = gpu_check.main(
        ["--device", "cpu", "--dtype", "fp32", *small, *eight_b, *dispatch, "--out", str(out)]
    )
    result = json.loads(out.read_text())
    assert code == 0
    assert [check["init_std"] for check in result["exactness"]] == [0.25, 0.02]
    for check in result["exactness"]:  # fp32 on CPU: equal, and the target never disagrees with itself
        assert check["identical"] and check["self_disagreement_per_1000"] == 0.0
    for name in ("bigram", "8b"):
        row = result[name]
        assert row["replay_equals_generate"] and row["loop_equals_generate"] and row["accept_length"] >= 1.0
        assert row["replay_record_ms_per_token"] > 0 and row["verify_ms_per_step"] > 0
    assert result["trace"]["equal"] and result["trace"]["target_side"].startswith("trace, captured by local")
    assert result["dispatch"]["equal"] and result["dispatch"]["placement"] == {"cpu": 6, "disk": 2}
    assert result["8b"]["shape"]["num_hidden_layers"] == 4 and result["8b"]["shape"]["vocab_size"] == 512
