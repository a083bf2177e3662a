"""Model config files read as plain JSON, checked (torch-free: the lint and the pages read sizes
without the model stack)."""

from __future__ import annotations

import json
from pathlib import Path

from backend import BadInput, first_line

MAX_CONFIG_BYTES = 16 * 1024 * 1024
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
)  # any: a tokenizer


def read_json_object(file: Path) -> dict:
    """A JSON object from a config file: a regular file of bounded size, UTF-8, an object. Every
    failure is a BadInput naming the file."""
    if not file.is_file():
        raise BadInput(f"{file}: not a regular file")
    if file.stat().st_size > MAX_CONFIG_BYTES:
        raise BadInput(f"{file}: {file.stat().st_size} bytes is too large for a config file")
    try:
        raw = json.loads(file.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise BadInput(f"{file}: not UTF-8 text") from None
    except (json.JSONDecodeError, RecursionError) as error:
        raise BadInput(f"{file}: not valid JSON ({first_line(error)})") from None
    if not isinstance(raw, dict):
        raise BadInput(f"{file}: expected a JSON object")
    return raw


def config_sizes(raw: dict, file: Path, keys) -> dict[str, int | None]:
    """{key: value} of a model config's sizes (top level, else text_config), each absent (None) or a
    positive integer; BadInput naming the file otherwise."""
    text_config = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}
    sizes = {}
    for key in keys:
        value = raw.get(key, text_config.get(key))
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise BadInput(f"{file}: {key} must be a positive integer, got {value!r}")
        sizes[key] = value
    return sizes
