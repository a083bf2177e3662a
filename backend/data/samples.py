"""Samples in the training JSONL format of docs/seed-story.md, validated record by record
(docs/reference.md §5).

One JSON object per line: input_ids (token ids), loss_mask (0/1, same length), seq_len,
n_prompt_tokens, n_response_tokens, source. Bad records are reported by line number and reason;
good ones are kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from backend import BadInput

REQUIRED_FIELDS = ("input_ids", "loss_mask")


@dataclass
class Sample:
    """One validated sample, whatever file it came from; the store returns the same type (with its
    database id, dataset and order filled in)."""

    input_ids: list[int]
    loss_mask: list[int]
    prompt_len: int  # n_prompt_tokens: the replay prompt is input_ids[:prompt_len], used as is
    source: str = ""
    line: int | None = None  # line (or item / file number) in the source file
    extra: dict = field(default_factory=dict)  # text, feature_file, ... per format
    id: int | None = None
    dataset_id: int | None = None
    index: int = 0  # order within its dataset

    @property
    def prompt_ids(self) -> list[int]:
        return self.input_ids[: self.prompt_len]

    @property
    def seq_len(self) -> int:
        return len(self.input_ids)

    @property
    def text(self) -> str | None:
        """The sample's text as its file gave it (conversations, plain prompts), else None."""
        text = self.extra.get("text")
        return text if isinstance(text, str) else None

    @property
    def feature_file(self) -> str | None:
        """The SpecForge feature file this sample was read from, else None."""
        path = self.extra.get("feature_file")
        return path if isinstance(path, str) else None

    @property
    def loss_coverage(self) -> float:
        return sum(self.loss_mask) / len(self.loss_mask) if self.loss_mask else 0.0


@dataclass
class Rejected:
    line: int
    reason: str


def parse_record(record, vocab_size: int | None = None) -> Sample:
    """Validate one decoded JSON record; raise ValueError with a user-facing reason."""
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    missing = [name for name in REQUIRED_FIELDS if name not in record]
    if missing:
        raise ValueError(
            f"missing field(s) {', '.join(missing)} (have: {', '.join(sorted(record)) or 'none'})"
        )
    ids, mask = record["input_ids"], record["loss_mask"]
    if not isinstance(ids, list) or not ids or not all(type(t) is int for t in ids):
        raise ValueError("input_ids must be a non-empty list of integers")
    if any(t < 0 or (vocab_size is not None and t >= vocab_size) for t in ids):
        bound = f"0..{vocab_size - 1}" if vocab_size else ">= 0"
        raise ValueError(f"input_ids has ids outside the vocabulary ({bound})")
    if (
        not isinstance(mask, list)
        or len(mask) != len(ids)
        or any(m not in (0, 1) or type(m) is not int for m in mask)
    ):
        raise ValueError(f"loss_mask must be a list of 0/1 with the same length as input_ids ({len(ids)})")
    if "seq_len" in record and record["seq_len"] != len(ids):
        raise ValueError(f"seq_len {record['seq_len']} != len(input_ids) {len(ids)}")
    prompt_len = record.get("n_prompt_tokens")
    if prompt_len is None:
        prompt_len = mask.index(1) if 1 in mask else len(ids)
    if type(prompt_len) is not int or not 1 <= prompt_len <= len(ids):
        raise ValueError(f"n_prompt_tokens must be an integer in 1..{len(ids)}, got {prompt_len!r}")
    response = record.get("n_response_tokens")
    if response is not None and (type(response) is not int or prompt_len + response != len(ids)):
        raise ValueError(
            f"n_prompt_tokens + n_response_tokens ({prompt_len} + {response}) != {len(ids)} tokens"
        )
    source = record.get("source", "")
    extra = {k: v for k, v in record.items() if k not in (*REQUIRED_FIELDS, "n_prompt_tokens", "source")}
    return Sample(list(ids), list(mask), prompt_len, str(source), extra=extra)


MAX_LINE_BYTES = 256 * 1024 * 1024  # one record; longer lines are refused, not read whole


def require_regular_file(path: Path) -> None:
    """Only regular files are read: a FIFO would block forever, /dev/zero never ends."""
    if not path.exists():
        raise BadInput(f"{path}: no such file")
    if not path.is_file():
        raise BadInput(f"{path}: not a regular file")


def read_jsonl(path: str | Path, vocab_size: int | None = None) -> tuple[list[Sample], list[Rejected]]:
    rejected: list[Rejected] = []
    return list(iter_jsonl(path, vocab_size, rejected)), rejected


def iter_jsonl(path: str | Path, vocab_size: int | None, rejected: list[Rejected]) -> Iterator[Sample]:
    """The valid samples of a JSONL file, one line at a time (memory: one record); the rejected
    lines are appended to `rejected` as they are met."""
    path = Path(path)
    require_regular_file(path)
    with path.open("rb") as handle:
        for number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if len(raw) > MAX_LINE_BYTES:
                rejected.append(Rejected(number, f"a record longer than {MAX_LINE_BYTES} bytes"))
                while raw and not raw.endswith(b"\n"):  # skip the rest of that line
                    raw = handle.readline(MAX_LINE_BYTES + 1)
                continue
            if not raw.strip():
                continue
            try:
                # utf-8-sig: a byte-order mark (files written on Windows) starts the first line
                sample = parse_record(
                    json.loads(raw.decode("utf-8-sig" if number == 1 else "utf-8")), vocab_size
                )
            except UnicodeDecodeError:
                rejected.append(Rejected(number, "not UTF-8 text"))
                continue
            except json.JSONDecodeError as error:
                rejected.append(Rejected(number, f"invalid JSON: {error.msg} at column {error.colno}"))
                continue
            except RecursionError:
                rejected.append(Rejected(number, "JSON nested too deeply"))
                continue
            except ValueError as error:
                rejected.append(Rejected(number, str(error)))
                continue
            sample.line = number
            yield sample


def sample_at(path: str | Path, index: int, vocab_size: int | None = None) -> Sample:
    """The index-th valid record (0-based, counting only good records) of a JSONL file."""
    samples, rejected = read_jsonl(path, vocab_size)
    if not samples:
        reasons = "; ".join(f"line {r.line}: {r.reason}" for r in rejected[:3])
        raise BadInput(f"{path}: no valid sample ({reasons or 'the file has no records'})")
    if not 0 <= index < len(samples):
        raise BadInput(
            f"--index {index} out of range: {path} has {len(samples)} valid samples (0..{len(samples) - 1})"
        )
    return samples[index]
