"""Loaded models, kept between jobs: targets and drafts cached by path in small LRUs, each key with
the directory's file stamps, so that a directory whose files changed on disk is loaded again.

A wiring override is a property of a request, never of a loaded draft: one draft directory is
loaded once whatever wiring the requests feed it. Callers hold `tasks.MANAGER.model_lock` (the
dashboard) or are alone in their process (the CLI).
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any


class LRU:
    def __init__(self, size: int):
        self.size = size
        self.items: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key, make):
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key]
        value = make()
        self.items[key] = value
        while len(self.items) > self.size:
            self.items.popitem(last=False)
        return value

    def clear(self) -> None:
        self.items.clear()


def files_stamp(path: str | Path) -> tuple:
    """(name, modification time) of each file directly in the directory `path` (empty when it is not
    one): part of a loaded model's cache key, so that rewritten weights or config are never served stale."""
    from backend.service.stamps import stamp

    try:
        files = sorted(entry for entry in Path(path).iterdir() if entry.is_file())
    except OSError:
        return ()
    return tuple(zip((f.name for f in files), stamp(*files), strict=True))


_targets = LRU(2)
_drafts = LRU(4)


def target(
    path: str,
    device: str | None = None,
    dtype: str | None = None,
    device_map: str | None = None,
    max_memory: str | None = None,
):
    from backend.engine.loading import load_target

    return _targets.get(
        (str(path), files_stamp(path), device, dtype, device_map, max_memory),
        lambda: load_target(path, device, dtype, device_map, max_memory),
    )


def draft(target, path: str):
    """(Eagle3Draft, PreflightReport) for `path` on `target`; PreflightRefused when it fails. The
    report checks the draft's declared wiring: a request's override is resolved per request
    (`ReplayRequest.reading_for`), so `report.wiring` is always what the draft declares."""
    from backend.engine.preflight import load_checked_draft

    key = (target.path, str(target.device), str(target.dtype), id(target.model), str(path), files_stamp(path))
    return _drafts.get(key, lambda: load_checked_draft(path, target))


def pair(target_path: str, draft_path: str, device=None, dtype=None, device_map=None, max_memory=None):
    """(target, draft, preflight report of the declared wiring)."""
    loaded = target(target_path, device, dtype, device_map, max_memory)
    module, report = draft(loaded, draft_path)
    return loaded, module, report


def is_dflash_draft(draft) -> bool:
    """Whether `draft` (a loaded draft or its folder) is a DFlash one (its config.json's method)."""
    from backend.drafts.dflash_config import is_dflash

    if isinstance(draft, str | Path):
        return is_dflash(draft)
    return getattr(draft.config, "method", None) == "dflash"


def forget() -> None:
    """Drop every loaded model (tests, and a user who changed files on disk)."""
    _targets.clear()
    _drafts.clear()
