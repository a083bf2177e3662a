"""What every real-engine check asserts (tests/real_engine): the replay reproduced the engine."""

from __future__ import annotations


def assert_reproduced(result: dict, engine: str) -> None:
    """Every prompt equal step for step, the same tokens, and the headline saying so for `engine`."""
    rows = result["rows"]
    assert rows and all(r["equal_step_for_step"] for r in rows), [
        (r["prompt"], r["first_difference"]) for r in rows
    ]
    assert all(r["same_tokens"] for r in rows)
    assert result["headline"].startswith(f"the replay reproduces this {engine} on {len(rows)}/{len(rows)}")
