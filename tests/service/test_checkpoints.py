"""Directories added in the dashboard are kept in the database: a reload finds them again."""

from __future__ import annotations

import pytest


def test_added_drafts_survive_in_the_database_and_bad_paths_say_which_part_is_missing(tmp_path, db_url):
    from backend import BadInput
    from backend.service import checkpoints

    first, second = tmp_path / "a" / "final", tmp_path / "b" / "final"
    for directory in (first, second):
        directory.mkdir(parents=True)
        (directory / "config.json").write_text("{}")
    assert checkpoints.remember(db_url, "draft", str(first)) == "final"
    checkpoints.remember(db_url, "draft", str(second))
    checkpoints.remember(db_url, "draft", str(first))  # again: not duplicated, now the latest
    assert checkpoints.remembered(db_url, "draft") == [("final", str(second)), ("final", str(first))]
    assert checkpoints.remembered(db_url, "target") == []
    with pytest.raises(BadInput, match="no such directory"):
        checkpoints.remember(db_url, "draft", str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput, match="has no config.json"):
        checkpoints.remember(db_url, "draft", str(tmp_path / "empty"))
