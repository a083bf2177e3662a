"""Training-JSONL records and files for the import tests (data, service and CLI)."""

from __future__ import annotations

import json
from pathlib import Path

VOCAB = 128  # the vocabulary the import tests validate token ids against


def good_record(n=6, prompt=2, source="a") -> dict:
    return {
        "input_ids": list(range(1, n + 1)),
        "loss_mask": [0] * prompt + [1] * (n - prompt),
        "seq_len": n,
        "n_prompt_tokens": prompt,
        "n_response_tokens": n - prompt,
        "source": source,
    }


def write_lines(path: Path, lines) -> Path:
    path.write_bytes(b"\n".join(line if isinstance(line, bytes) else line.encode() for line in lines))
    return path


# Line number -> a record with one defect each; lines 1 and 14 of mixed_jsonl() are good.
BAD_LINES = {
    2: b"{not json",
    3: b"[1, 2, 3]",
    4: json.dumps({"input_ids": [1, 2]}).encode(),
    5: json.dumps({**good_record(), "loss_mask": [0, 1]}).encode(),
    6: json.dumps({**good_record(), "input_ids": [1, 2, 3, 4, 5, VOCAB + 5]}).encode(),
    7: json.dumps({**good_record(), "seq_len": 99}).encode(),
    8: json.dumps({**good_record(), "n_prompt_tokens": 0}).encode(),
    9: json.dumps({**good_record(), "input_ids": [1, 2, "3", 4, 5, 6]}).encode(),
    10: b"\xff\xfe garbage",
    11: json.dumps({**good_record(), "loss_mask": [0, 0, 2, 1, 1, 1]}).encode(),
    12: json.dumps({**good_record(), "n_response_tokens": 1}).encode(),
    13: json.dumps({**good_record(), "input_ids": []}).encode(),
}


def mixed_jsonl(path: Path) -> Path:
    """A JSONL file with a good record (source a), each of BAD_LINES, then a good record (source b)."""
    lines = (
        [json.dumps(good_record()).encode()]
        + [BAD_LINES[n] for n in range(2, 14)]
        + [json.dumps(good_record(source="b")).encode()]
    )
    return write_lines(path, lines)
