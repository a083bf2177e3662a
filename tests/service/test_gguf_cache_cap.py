"""The GGUF cache's cap: least recently used conversions go first, none used in the last hour."""

import os

import pytest

from backend import BadInput
from backend.service.llamacpp_server import RECENT_S, keep_under_cap


def _entry(folder, name, megabytes, used):
    gguf = folder / f"{name}.gguf"
    gguf.write_bytes(b"\0" * (megabytes * 1024**2))
    (folder / f"{name}.log").write_text("log")
    os.utime(gguf, (used, used))
    return gguf


def test_the_oldest_used_go_until_the_cap_holds_and_recent_ones_stay(tmp_path, monkeypatch):
    now = 1_000_000.0
    old = now - 2 * RECENT_S
    monkeypatch.setenv("SPECLENS_GGUF_CACHE_GB", str(3 / 1024))  # 3 MB
    oldest = _entry(tmp_path, "a", 1, old - 30)
    older = _entry(tmp_path, "b", 1, old - 20)
    old_kept = _entry(tmp_path, "c", 1, old - 10)
    big_now = _entry(tmp_path, "d", 2, now - 5)  # a pair in use: stays though it alone fills the cap
    small_now = _entry(tmp_path, "e", 1, now)
    removed = keep_under_cap(tmp_path, now)
    assert sorted(removed) == [oldest, older, old_kept]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.gguf", "d.log", "e.gguf", "e.log"]
    assert big_now.is_file() and small_now.is_file()


def test_under_the_cap_nothing_goes(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECLENS_GGUF_CACHE_GB", raising=False)  # the default, 4 GB
    kept = [_entry(tmp_path, name, 1, 10.0) for name in "ab"]
    assert keep_under_cap(tmp_path, 1e9) == [] and all(p.is_file() for p in kept)


@pytest.mark.parametrize("said", ["lots", "-1", "nan"])
def test_a_cap_that_is_not_a_size_is_refused_in_one_line(tmp_path, monkeypatch, said):
    monkeypatch.setenv("SPECLENS_GGUF_CACHE_GB", said)
    with pytest.raises(BadInput, match="SPECLENS_GGUF_CACHE_GB"):
        keep_under_cap(tmp_path)
