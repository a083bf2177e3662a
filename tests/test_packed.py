"""The real pair's drafts are committed xz-packed (demo/packed.py): set-up unpacks exactly what the build
packed, replaces a stale file, and refuses a damaged archive with one line, leaving nothing half-written."""

from __future__ import annotations

import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest

from demo import packed

ROOT = Path(__file__).resolve().parents[1]
REAL_DRAFTS = ROOT / "demo" / "smollm2" / "drafts"


def built(tmp_path: Path, payload: bytes = b"weights " * 5000) -> Path:
    draft = tmp_path / "final"
    draft.mkdir()
    (draft / packed.WEIGHTS).write_bytes(payload)
    packed.pack(draft)
    return draft


def test_unpack_writes_what_was_packed_and_is_then_a_no_op(tmp_path):
    draft = built(tmp_path)
    original = (draft / packed.WEIGHTS).read_bytes()
    (draft / packed.WEIGHTS).unlink()  # a fresh clone: git holds only the .xz and the digest
    assert packed.unpack(draft) is True
    assert (draft / packed.WEIGHTS).read_bytes() == original
    assert packed.unpack(draft) is False and packed.is_unpacked(draft)
    assert (draft / packed.PACKED).stat().st_size < len(original)


def test_a_stale_unpacked_file_is_replaced(tmp_path):
    draft = built(tmp_path)
    original = (draft / packed.WEIGHTS).read_bytes()
    (draft / packed.WEIGHTS).write_bytes(b"an older build's weights")
    assert not packed.is_unpacked(draft)
    assert packed.unpack(draft) is True and (draft / packed.WEIGHTS).read_bytes() == original


def test_a_damaged_archive_is_refused_and_leaves_nothing(tmp_path):
    draft = built(tmp_path)
    (draft / packed.WEIGHTS).unlink()
    data = bytearray((draft / packed.PACKED).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (draft / packed.PACKED).write_bytes(bytes(data))
    with pytest.raises(ValueError, match="cannot be unpacked|sha256"):
        packed.unpack(draft)
    assert sorted(p.name for p in draft.iterdir()) == sorted([packed.PACKED, packed.DIGEST])


def test_weights_that_do_not_match_the_digest_are_refused(tmp_path):
    draft = built(tmp_path)
    (draft / packed.WEIGHTS).unlink()
    with lzma.open(draft / packed.PACKED, "wb") as out:  # a valid archive of other bytes
        out.write(b"not the weights")
    with pytest.raises(ValueError, match="sha256"):
        packed.unpack(draft)
    assert not (draft / packed.WEIGHTS).exists()


def test_set_up_names_the_damaged_file_in_one_line(tmp_path):
    draft = built(tmp_path)
    (draft / packed.WEIGHTS).unlink()
    (draft / packed.PACKED).write_bytes(b"not xz at all")
    done = subprocess.run(
        [sys.executable, "-m", "demo.smollm2", "--drafts", str(tmp_path), "--out", str(tmp_path / "target")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert str(draft / packed.PACKED) in lines[0] and "cannot be unpacked" in lines[0]


@pytest.mark.parametrize("name", ["final", "epoch1", "miswired"])
def test_each_committed_draft_is_packed_with_its_digest(name):
    draft = REAL_DRAFTS / name
    assert (draft / packed.PACKED).is_file() and len(packed.expected_digest(draft)) == 64
    if (draft / packed.WEIGHTS).exists():  # unpacked by set-up: it must be the committed weights
        assert packed.is_unpacked(draft)
