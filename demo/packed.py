"""The real pair's drafts are committed xz-compressed, and unpacked next to themselves on set-up.

Three SmolLM2 drafts (draft vocabulary 8,192, full-width MLP, bf16) are 19.7 MB each as safetensors, which
puts `demo/` past its 60 MB budget (issue 28); xz takes each to about 13.9 MB. What git holds for a draft
is `model.safetensors.xz` and `model.safetensors.sha256` (the digest of the unpacked file); `python -m
demo.smollm2` (the README's set-up, which also converts the target) writes `model.safetensors` beside
them, which git ignores, so every loader, SpecLens's and the engines', reads a plain SpecForge directory.

Only the standard library's `lzma` and `hashlib` are used: unpacking needs nothing installed.
"""

from __future__ import annotations

import hashlib
import lzma
import os
from pathlib import Path

WEIGHTS = "model.safetensors"
PACKED = WEIGHTS + ".xz"
DIGEST = WEIGHTS + ".sha256"
CHUNK = 1 << 20


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def pack(draft_dir: Path) -> Path:
    """Compress `draft_dir/model.safetensors` to its `.xz` and record the unpacked file's digest."""
    weights = draft_dir / WEIGHTS
    partial = draft_dir / (PACKED + ".partial")
    with weights.open("rb") as source, lzma.open(partial, "wb", preset=9 | lzma.PRESET_EXTREME) as out:
        while block := source.read(CHUNK):
            out.write(block)
    os.replace(partial, draft_dir / PACKED)
    (draft_dir / DIGEST).write_text(sha256(weights) + "\n")
    return draft_dir / PACKED


def expected_digest(draft_dir: Path) -> str:
    try:
        return (draft_dir / DIGEST).read_text().split()[0]
    except (OSError, IndexError) as error:
        raise ValueError(
            f"{draft_dir / DIGEST}: missing or empty (the digest of the unpacked weights)"
        ) from error


def is_unpacked(draft_dir: Path) -> bool:
    """The plain weights are there and are the packed ones (a file from an older build is not)."""
    weights = draft_dir / WEIGHTS
    return weights.is_file() and sha256(weights) == expected_digest(draft_dir)


def unpack(draft_dir: Path) -> bool:
    """Write `model.safetensors` from the `.xz` unless the right one is there; True when it wrote.
    The file appears whole or not at all; a digest that does not match is an error, nothing is left."""
    if is_unpacked(draft_dir):
        return False
    partial = draft_dir / (WEIGHTS + ".partial")
    try:
        with lzma.open(draft_dir / PACKED, "rb") as source, partial.open("wb") as out:
            while block := source.read(CHUNK):
                out.write(block)
    except (OSError, lzma.LZMAError) as error:
        partial.unlink(missing_ok=True)
        raise ValueError(f"{draft_dir / PACKED}: cannot be unpacked ({error})") from error
    if sha256(partial) != expected_digest(draft_dir):
        partial.unlink()
        raise ValueError(f"{draft_dir / PACKED}: unpacks to weights whose sha256 is not {DIGEST}'s")
    os.replace(partial, draft_dir / WEIGHTS)
    return True


def packed_drafts(drafts_dir: Path) -> list[Path]:
    return sorted(d for d in drafts_dir.iterdir() if (d / PACKED).is_file()) if drafts_dir.is_dir() else []


def unpack_all(drafts_dir: Path) -> list[Path]:
    """Unpack every packed draft under `drafts_dir`; the ones written."""
    return [d for d in packed_drafts(drafts_dir) if unpack(d)]
