"""Training JSONL samples (the format of docs/seed-story.md): good records kept, bad ones reported by line and reason."""

from __future__ import annotations

import json

import pytest

from backend import BadInput
from backend.data.samples import read_jsonl, sample_at


def record(**overrides):
    base = {
        "input_ids": [5, 6, 7, 8],
        "loss_mask": [0, 0, 1, 1],
        "seq_len": 4,
        "n_prompt_tokens": 2,
        "n_response_tokens": 2,
        "source": "B7_sharegpt",
    }
    base.update(overrides)
    return json.dumps(base)


def test_good_and_bad_records(tmp_path):
    lines = [
        record(),
        "{not json",
        json.dumps([1, 2]),
        record(loss_mask=[0, 1]),
        record(input_ids=[5, 6, "x", 8]),
        record(seq_len=9),
        record(n_prompt_tokens=0),
        record(n_response_tokens=5),
        json.dumps({"loss_mask": [1]}),
        "",
        record(input_ids=[5, 6, 7, 999]),
        record(source="other"),
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    samples, rejected = read_jsonl(path, vocab_size=100)
    assert [s.line for s in samples] == [1, 12]
    assert samples[0].prompt_ids == [5, 6] and samples[0].source == "B7_sharegpt"
    reasons = {r.line: r.reason for r in rejected}
    assert set(reasons) == {2, 3, 4, 5, 6, 7, 8, 9, 11}
    assert reasons[2].startswith("invalid JSON")
    assert "missing field(s) input_ids" in reasons[9]
    assert "outside the vocabulary" in reasons[11]
    assert sample_at(path, 1, 100).source == "other"
    with pytest.raises(BadInput, match="out of range"):
        sample_at(path, 2, 100)


def test_not_utf8_and_missing_file(tmp_path):
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b"\xff\xfe\x00garbage\n")
    samples, rejected = read_jsonl(path)
    assert not samples and rejected[0].reason == "not UTF-8 text"
    with pytest.raises(BadInput, match="no valid sample"):
        sample_at(path, 0)
    with pytest.raises(BadInput, match="no such file"):
        read_jsonl(tmp_path / "missing.jsonl")
