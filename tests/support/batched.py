"""A batched replay held to its samples' lone replays (issue 56): every sample equal, tokens and
per-step counts, or the first difference at a near-tie both runs recorded (sampling.near_tie_rows):
the rounding of more rows' products may take the other of two nearly tied tokens there."""

from __future__ import annotations


def same_or_near_tie(lone: list, batched: list) -> int | None:
    """None when the two replays' outputs and steps are equal; else the sequence position of the first
    token they chose differently, asserted to be at a near-tie a run recorded. Records of one sample:
    its PrefillRecord, then its StepRecords."""
    from backend.run.records import PrefillRecord

    for a, b in zip(lone, batched, strict=False):
        if isinstance(a, PrefillRecord):
            assert a.first_token == b.first_token, "the prefill's token differs (no verify row to name)"
            continue
        if (a.drafted_ids, a.accepted_count, a.committed_ids) == (
            b.drafted_ids,
            b.accepted_count,
            b.committed_ids,
        ):
            continue
        assert a.position == b.position and a.drafted_ids == b.drafted_ids, (
            "the drafts differ before any verify row did: the draft's own rounding, not a target near-tie"
        )
        row = next(
            i for i, (x, y) in enumerate(zip(a.target_argmax_ids, b.target_argmax_ids, strict=True)) if x != y
        )
        assert row in a.near_tie_rows or row in b.near_tie_rows, (
            f"verify row {row} at position {a.position} chose {a.target_argmax_ids[row]} alone and "
            f"{b.target_argmax_ids[row]} batched without a recorded near-tie"
        )
        return a.position + row + 1
    assert len(lone) == len(batched)
    return None
