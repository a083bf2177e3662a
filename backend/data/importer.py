"""Dataset import: every supported format becomes validated samples; bad records are reported.

Formats:
- `jsonl`: the training JSONL of docs/seed-story.md (input_ids, loss_mask, seq_len, n_prompt_tokens,
  n_response_tokens, source), validated by backend.data.samples;
- `sharegpt`: a JSON list (or JSONL) of {"conversations": [{"from": "human"|"gpt"|"system",
  "value": str}, ...]} (or "messages" with role/content), rendered with the target's chat template;
  loss_mask is 1 on assistant tokens, the prompt is everything before the first assistant reply;
- `specforge`: SpecForge offline feature files (.ckpt, a file or a directory of them), loaded with
  weights_only=True; the sample remembers its file for the train-vs-serve diff;
- `prompts`: plain text, one prompt per non-empty line (`\\n` inside a line stands for a newline); or
  JSON records of a prompt as text (PROMPT_KEYS: {"prompt": ...}, {"text": ...}, {"question": ...},
  {"instruction": ...}, as benchmark and eval sets write them), with an optional answer (ANSWER_KEYS)
  whose tokens follow the prompt's. Both are tokenized as raw text, without the chat template (what a
  /v1/completions request sends); a chat turn is `messages`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from backend import BadInput, first_line
from backend.data.conversations import render_conversation
from backend.data.samples import Rejected, Sample, iter_jsonl, parse_record, read_jsonl, require_regular_file

FORMATS = ("jsonl", "sharegpt", "specforge", "prompts")
PROMPT_KEYS = ("prompt", "text", "question", "instruction", "input")  # the first present is the prompt
ANSWER_KEYS = ("completion", "response", "output", "answer", "target")
ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "model": "assistant",
}


@dataclass
class ImportResult:
    format: str
    samples: list[Sample]
    rejected: list[Rejected] = field(default_factory=list)
    imported: int | None = None  # how many were stored (a streamed import keeps no sample list)
    already: int | None = None  # the dataset that already holds the same samples (nothing stored)

    def __post_init__(self):
        if self.imported is None:
            self.imported = len(self.samples)


def detect_format(path: Path) -> str:
    if path.is_dir() or path.suffix in (".ckpt", ".pt"):
        return "specforge"
    if path.suffix == ".txt":
        return "prompts"
    with path.open("rb") as handle:  # the first 4 KB only: never the whole file
        head = handle.read(4096).lstrip().removeprefix(b"\xef\xbb\xbf").lstrip()
    if head.startswith(b"["):
        return "sharegpt"
    first = head.split(b"\n", 1)[0]
    if b'"conversations"' in first or b'"messages"' in first:
        return "sharegpt"
    try:
        record = json.loads(first)
    except ValueError:  # a line longer than the head read, or not JSON: the training reader says which
        return "jsonl"
    if isinstance(record, dict) and "input_ids" not in record and any(k in record for k in PROMPT_KEYS):
        return "prompts"
    return "jsonl"


def check_source(path: str | Path) -> Path:
    """A dataset path is a folder or a regular file: checked before anything heavy (a tokenizer, the
    model stack) is loaded, so a bad path is refused at once."""
    path = Path(path)
    if not path.exists():
        raise BadInput(f"{path}: no such file or directory")
    if not path.is_dir():
        require_regular_file(path)
    return path


def _source(path: str | Path, format: str | None, tokenizer) -> tuple[Path, str]:
    """The checked path (a folder, or a regular file) and its format (given, else detected)."""
    path = check_source(path)
    format = format or detect_format(path)
    if format not in FORMATS:
        raise BadInput(f"unknown format {format!r}; use one of {', '.join(FORMATS)}")
    if format in ("sharegpt", "prompts") and tokenizer is None:
        raise BadInput(
            f"{format} import needs the target's tokenizer (the target directory has none, or it cannot be loaded offline)"
        )
    return path, format


def read_dataset(
    path: str | Path, tokenizer=None, vocab_size: int | None = None, format: str | None = None
) -> ImportResult:
    path, format = _source(path, format, tokenizer)
    if format == "jsonl":
        samples, rejected = read_jsonl(path, vocab_size)
        return ImportResult(format, samples, rejected)
    if format == "sharegpt":
        return _read_sharegpt(path, tokenizer)
    if format == "specforge":
        return _read_feature_files(path, vocab_size)
    return _read_prompts(path, tokenizer)


def stream_dataset(
    path: str | Path, tokenizer=None, vocab_size: int | None = None, format: str | None = None
) -> tuple[str, Iterator[Sample], list[Rejected]]:
    """(format, the valid samples as an iterator, the rejected list filled as it is consumed).
    Training JSONL streams one line at a time, so an import's memory does not grow with the file;
    the other formats are read whole (their files hold one JSON document or a few feature files)."""
    path, format = _source(path, format, tokenizer)
    if format == "jsonl":
        rejected: list[Rejected] = []
        return format, iter_jsonl(path, vocab_size, rejected), rejected
    result = read_dataset(path, tokenizer, vocab_size, format)
    return result.format, iter(result.samples), result.rejected


def _records(path: Path) -> list[tuple[int, object]]:
    """(line or item number, decoded record) for a JSON list or a JSONL file; undecodable lines are
    returned as exceptions for the caller to reject."""
    require_regular_file(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark is ordinary in files written on Windows
    except UnicodeDecodeError as error:
        raise BadInput(f"{path}: not UTF-8 text") from error
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as error:
            raise BadInput(
                f"{path}: invalid JSON: {error.msg} at line {error.lineno} column {error.colno}"
            ) from error
        except RecursionError:
            raise BadInput(f"{path}: JSON nested too deeply") from None
        return list(enumerate(items, start=1))
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                out.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                out.append((number, ValueError(f"invalid JSON: {error.msg} at column {error.colno}")))
            except RecursionError:
                out.append((number, ValueError("JSON nested too deeply")))
    return out


def _read_sharegpt(path: Path, tokenizer) -> ImportResult:
    if not getattr(tokenizer, "chat_template", None):
        raise BadInput(
            "the target's tokenizer has no chat template; ShareGPT conversations cannot be rendered"
        )
    from jinja2 import TemplateError, TemplateSyntaxError

    try:  # a template that does not even compile fails every conversation: say so once
        tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)
    except TemplateSyntaxError as error:
        where = getattr(tokenizer, "name_or_path", "") or "the target"
        raise BadInput(f"{where}: its chat template does not compile ({first_line(error)})") from None
    except Exception:  # noqa: BLE001 - a template may refuse this probe; the conversations decide
        pass
    result = ImportResult("sharegpt", [])
    for number, record in _records(path):
        try:
            if isinstance(record, Exception):
                raise record
            messages = conversation_messages(record)
            result.samples.append(
                render_conversation(
                    tokenizer, messages, number, str(record.get("source", record.get("id", "sharegpt")))
                )
            )
        except (ValueError, TemplateError) as error:  # TemplateError: the template's raise_exception
            result.rejected.append(Rejected(number, first_line(error)))
    return result


def conversation_messages(record) -> list[dict]:
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    turns = record.get("conversations", record.get("messages"))
    if not isinstance(turns, list) or not turns:
        raise ValueError("no 'conversations' (or 'messages') list")
    messages = []
    for position, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise ValueError(f"turn {position} is not an object")
        role = turn.get("from", turn.get("role"))
        content = turn.get("value", turn.get("content"))
        if not isinstance(role, str) or role not in ROLES:
            raise ValueError(
                f"turn {position}: unknown speaker {role!r} (expected human/gpt/system or user/assistant)"
            )
        if not isinstance(content, str):
            raise ValueError(f"turn {position}: the text is not a string")
        messages.append({"role": ROLES[role], "content": content})
    if messages[0]["role"] == "assistant":
        raise ValueError("the conversation starts with the assistant: there is no prompt")
    return messages


def _read_feature_files(path: Path, vocab_size: int | None) -> ImportResult:
    from backend.data.features import load_feature_file

    files = sorted(path.glob("*.ckpt")) if path.is_dir() else [path]
    if not files:
        raise BadInput(f"{path}: no .ckpt feature files")
    result = ImportResult("specforge", [])
    for number, file in enumerate(files, start=1):
        try:
            features = load_feature_file(file)
            record = {"input_ids": features.input_ids, "loss_mask": [int(m != 0) for m in features.loss_mask]}
            if 1 in record["loss_mask"]:
                record["n_prompt_tokens"] = max(1, record["loss_mask"].index(1))
            sample = parse_record(record, vocab_size)
        except (BadInput, ValueError) as error:
            result.rejected.append(
                Rejected(number, f"{file.name}: {str(error).replace(str(file) + ': ', '')}")
            )
            continue
        result.samples.append(
            Sample(
                sample.input_ids,
                sample.loss_mask,
                sample.prompt_len,
                "features",
                number,
                {"feature_file": str(file.resolve())},
            )
        )
    return result


def _read_prompts(path: Path, tokenizer) -> ImportResult:
    """One prompt per line of a text file, or per JSON record (PROMPT_KEYS, an optional answer)."""
    if path.suffix != ".txt":
        return _read_prompt_records(path, tokenizer)
    result = ImportResult("prompts", [])
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise BadInput(f"{path}: not UTF-8 text") from error
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        text = line.replace("\\n", "\n")
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if not ids:
            result.rejected.append(Rejected(number, "tokenizes to nothing"))
            continue
        result.samples.append(Sample(ids, [0] * len(ids), len(ids), "prompt", number, {"text": text}))
    return result


def _read_prompt_records(path: Path, tokenizer) -> ImportResult:
    result = ImportResult("prompts", [])
    for number, record in _records(path):
        try:
            if isinstance(record, Exception):
                raise record
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            key = next((k for k in PROMPT_KEYS if k in record), None)
            if key is None or not isinstance(record[key], str) or not record[key].strip():
                raise ValueError(f"no prompt text (a string under one of {', '.join(PROMPT_KEYS)})")
            answer_key = next((k for k in ANSWER_KEYS if isinstance(record.get(k), str)), None)
            prompt = tokenizer(record[key], add_special_tokens=False)["input_ids"]
            answer = (
                tokenizer(record[answer_key], add_special_tokens=False)["input_ids"] if answer_key else []
            )
            if not prompt:
                raise ValueError(f"the {key!r} text tokenizes to nothing")
        except ValueError as error:
            result.rejected.append(Rejected(number, first_line(error)))
            continue
        source = record.get("source", record.get("task_id", record.get("id", "prompt")))
        result.samples.append(
            Sample(
                prompt + answer,
                [0] * len(prompt) + [1] * len(answer),
                len(prompt),
                str(source),
                number,
                {"text": record[key]},
            )
        )
    return result
