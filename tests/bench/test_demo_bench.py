"""The demo-pair benchmark runs end to end at toy sizes: every mode produces generate's tokens."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # loads the demo pair and runs every mode: a benchmark smoke test


def test_demo_bench_modes_agree_with_generate():
    from backend.defaults import TOY
    from bench.demo_bench import MODES, run_demo, table

    result = run_demo(prompts=1, new_tokens=16, rounds=2, lengths=(16, 32), pair=TOY)
    ideal = result["ideal"]  # the pair's ideal speed-up and the job runner's share of it
    assert ideal["t1_ms"] > 0 and ideal["t_step_ms"] > 0 and ideal["accept_length"] > 1
    assert ideal["ideal_speedup"] == ideal["accept_length"] * ideal["t1_ms"] / ideal["t_step_ms"]
    assert 0 < ideal["job_over_ideal"] and "job / ideal" in table(result)
    assert [row["mode"] for row in result["rows"]] == list(MODES)
    assert all(row["equals_generate"] and row["tokens_per_s_median"] > 0 for row in result["rows"])
    assert set(result["ms_per_token_job"]) == {16, 32} and "x generate" in table(result)
    assert set(result["ms_per_token_tree_job"]) == {16, 32} and "job runner, tree" in table(result)
    tree = next(row for row in result["rows"] if row["mode"] == "tree_record")
    assert tree["accept_length"] > 1
