"""A cache key for files: their modification times, so that what was read from a file changed on disk
is read again (the readers', the models' and the checks' caches)."""

from __future__ import annotations

from pathlib import Path


def stamp(*paths: str | Path | None) -> tuple[float, ...]:
    """The modification time of each path (-1 where it is missing): a cache key that changes when a
    file does."""
    stamps = []
    for path in paths:
        try:
            stamps.append(Path(path).stat().st_mtime if path else -1.0)
        except OSError:
            stamps.append(-1.0)
    return tuple(stamps)
