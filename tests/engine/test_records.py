"""The record types the engine yields and the store persists (importable without torch)."""

from __future__ import annotations

from dataclasses import replace

from backend.run.records import (
    STORED_STEP_FIELDS,
    StepRecord,
    StepTree,
    no_progress,
    stored_fields,
    stored_step,
)


def step(drafted=(1, 2, 3), accepted=1) -> StepRecord:
    return StepRecord(
        step_index=0,
        position=3,
        pending_token=4,
        drafted_ids=list(drafted),
        accepted_count=accepted,
        bonus_id=9,
        committed_ids=list(drafted[:accepted]) + [9],
        target_argmax_ids=[1, 9, 9, 9],
    )


def test_rejection_index():
    assert step(accepted=1).rejection_index == 1
    assert step(accepted=0).rejection_index == 0
    assert step(accepted=3).rejection_index is None


def test_stored_fields_are_every_field_but_the_tensors_and_the_near_ties():
    """The tensors go to the run's artifact, the near-ties' positions to its metrics."""
    kept_elsewhere = {"aux_features", "draft_hidden", "near_tie_rows"}
    assert not kept_elsewhere & set(STORED_STEP_FIELDS)
    assert set(STORED_STEP_FIELDS) | kept_elsewhere == set(StepRecord.__dataclass_fields__)
    assert STORED_STEP_FIELDS[:3] == ("step_index", "position", "pending_token")


def test_a_stored_tree_is_written_as_json_and_read_back_typed_older_ones_too():
    chain = StepTree([1, 2], [-1, 0], depths=[1, 2], accepted_path=[0], decisions=["accepted", "rejected"])
    columns = stored_fields(replace(step(drafted=(1, 2)), tree=chain))
    assert columns["tree"] == chain.to_dict() and stored_step(columns).tree == chain
    older = {"tokens": [1, 2], "parents": [-1, 0], "decisions": ["accepted", "rejected"]}  # no newer keys
    tree = stored_step({**columns, "tree": older}).tree
    assert tree.decisions == ["accepted", "rejected"] and tree.draws == [] and tree.expected_accepted is None
    assert stored_step({**columns, "tree": None}).tree is None


def test_no_progress_takes_a_fraction_and_a_message():
    assert no_progress(0.5, "half") is None
