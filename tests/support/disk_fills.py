"""The CLI as users run it, on a disk that fills mid-run: `python tests/support/disk_fills.py MODE DB
ARGS...` runs `backend.cli.main(ARGS)` while a watcher thread, once the database holds `--after`
committed steps in its newest run, lowers the process's file-size limit (RLIMIT_FSIZE, a real kernel limit: writes
beyond it fail with EFBIG, as on a full disk):
- `log`: to the size the database file and its write-ahead log take together, so the log cannot grow
  past it and the database file can take what a checkpoint copies in: a checkpoint can still make
  room. (The limit is per file and covers writes in place too: at the log's size alone it would forbid
  a checkpoint's writes into a database file larger than the log, which holds every finished run.)
- `nothing`: to zero, so no file can be written at all.
Python ignores SIGXFSZ, so the writes fail with an error instead of killing the process."""

from __future__ import annotations

import os
import resource
import sqlite3
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def steps_in(db: str) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
            newest = "SELECT MAX(id) FROM runs"
            return connection.execute(f"SELECT COUNT(*) FROM steps WHERE run_id = ({newest})").fetchone()[0]
    except sqlite3.Error:
        return 0


def fill_after(mode: str, db: str, after: int) -> None:
    while steps_in(db) < after:
        time.sleep(0.02)
    limit = os.path.getsize(f"{db}-wal") + os.path.getsize(db) if mode == "log" else 0
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))


def main() -> int:
    mode, db, after, *args = sys.argv[1:]
    threading.Thread(target=fill_after, args=(mode, db, int(after)), daemon=True).start()
    from backend.cli import main as cli

    return cli(args)


if __name__ == "__main__":
    sys.exit(main())
