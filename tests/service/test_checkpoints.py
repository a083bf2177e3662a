"""Directories added in the dashboard are kept in the database: a reload finds them again."""

from __future__ import annotations

import pytest

DRAFT_CONFIG = '{"hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 32, "vocab_size": 50}'


def test_added_drafts_survive_in_the_database_and_bad_paths_say_which_part_is_missing(tmp_path, db_url):
    from backend import BadInput
    from backend.service import checkpoints

    first, second = tmp_path / "a" / "final", tmp_path / "b" / "final"
    for directory in (first, second):
        directory.mkdir(parents=True)
        (directory / "config.json").write_text(DRAFT_CONFIG)
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


def test_a_draft_whose_config_does_not_read_is_refused_and_never_made_the_default(tmp_path, db_url):
    """Issue 58 row 4: a config.json cut mid-string was added, made active and everyone's default."""
    from backend import BadInput
    from backend.service import checkpoints

    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "config.json").write_text(DRAFT_CONFIG[:30])
    with pytest.raises(BadInput, match=r"cut/config.json: not valid JSON"):
        checkpoints.remember(db_url, "draft", str(cut))
    assert checkpoints.remembered(db_url, "draft") == []
    (cut / "config.json").write_text('{"hidden_size": 16}')
    with pytest.raises(BadInput, match="lacks num_attention_heads"):
        checkpoints.remember(db_url, "draft", str(cut))
    (cut / "config.json").write_text(DRAFT_CONFIG)
    checkpoints.remember(db_url, "draft", str(cut))
    (cut / "config.json").write_text(DRAFT_CONFIG[:30])  # broken after it was added
    assert not checkpoints.readable(cut, "draft")  # the sidebar does not make it the default then
