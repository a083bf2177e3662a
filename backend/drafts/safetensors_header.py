"""A safetensors file's header checked before any tensor is read (docs/reference.md §1): the
header length, its JSON, every tensor's dtype, shape and byte range against the file's real size.
A truncated file, a header claiming a huge tensor or overlapping ranges is a BadInput naming the
file, and nothing is allocated for it."""

from __future__ import annotations

import json
import math
from pathlib import Path

from backend import BadInput

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the format's own limit
ITEM_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
    "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8, "F4": 1, "F6_E2M3": 1,
    "F6_E3M2": 1,
}  # fmt: skip


def check_safetensors(path: str | Path) -> dict[str, dict]:
    """{name: {"dtype", "shape"}} of a well-formed file; BadInput naming the file otherwise."""
    path = Path(path)
    header, data_bytes = _read_header(path)
    described, ranges = {}, []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, offsets = _checked_entry(path, name, entry, data_bytes)
        ranges.append((offsets[0], offsets[1], name))
        described[name] = {"dtype": dtype, "shape": shape}
    ranges.sort()
    for (_, end, first), (start, _, second) in zip(ranges, ranges[1:], strict=False):
        if start < end:
            raise BadInput(f"{path}: tensors {first!r} and {second!r} overlap")
    return described


def _read_header(path: Path) -> tuple[dict, int]:
    """The header's JSON object and the number of data bytes after it."""
    if not path.is_file():
        raise BadInput(f"{path}: not a regular file")
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise BadInput(f"{path}: truncated safetensors file ({size} bytes, no header)")
        length = int.from_bytes(prefix, "little")
        if length > MAX_HEADER_BYTES or 8 + length > size:
            raise BadInput(
                f"{path}: truncated or corrupt safetensors file (header of {length} bytes, file {size})"
            )
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise BadInput(f"{path}: corrupt safetensors header ({type(error).__name__})") from None
    if not isinstance(header, dict):
        raise BadInput(f"{path}: corrupt safetensors header (not an object)")
    return header, size - 8 - length


def _checked_entry(path: Path, name: str, entry, data_bytes: int) -> tuple[str, list[int], list[int]]:
    """(dtype, shape, data_offsets) of one tensor's header entry, each checked against the format and
    the file's `data_bytes`."""
    if not isinstance(entry, dict):
        raise BadInput(f"{path}: tensor {name!r}: malformed header entry")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in ITEM_BYTES:
        raise BadInput(f"{path}: tensor {name!r}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise BadInput(f"{path}: tensor {name!r}: bad shape {shape!r}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1] <= data_bytes
    ):
        raise BadInput(
            f"{path}: tensor {name!r}: byte range {offsets!r} lies outside the file's {data_bytes} data "
            "bytes (truncated, or the header claims more than the file holds)"
        )
    expected = math.prod(shape) * ITEM_BYTES[dtype]
    if offsets[1] - offsets[0] != expected:
        raise BadInput(
            f"{path}: tensor {name!r}: {dtype} {shape} needs {expected} bytes, the header gives "
            f"{offsets[1] - offsets[0]}"
        )
    return dtype, shape, offsets


SAFETENSORS_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")  # one file, or shards


def tensor_shapes(draft_dir: str | Path) -> dict[str, list[int]] | None:
    """{file name: shape} of a checkpoint's safetensors weights, read from their headers alone (one
    model.safetensors, or the shards model.safetensors.index.json lists): no tensor is loaded and torch
    is not imported. None when the weights are a pytorch_model.bin (only torch reads a pickle) or
    missing; BadInput naming the file for a bad header or index."""
    draft_dir = Path(draft_dir)
    single, index = (draft_dir / name for name in SAFETENSORS_WEIGHTS)
    if single.is_file():
        return {name: entry["shape"] for name, entry in check_safetensors(single).items()}
    if not index.is_file():
        return None
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as error:
        raise BadInput(f"{index}: not an index file with a weight_map ({error})") from None
    shapes = {}
    for shard in shards:
        file = draft_dir / str(shard)
        if file.resolve().parent != draft_dir.resolve() or not file.is_file():
            raise BadInput(f"{index}: shard {shard!r} is not a file in {draft_dir}")
        shapes.update({n: e["shape"] for n, e in check_safetensors(file).items()})
    return {name: shapes[name] for name in weight_map if name in shapes}
