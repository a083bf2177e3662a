"""A disk that fills while a replay records (issue 44): the CLI ends in exit 2 with one line, the
steps committed before the disk filled stay as a whole prefix, and the run is marked failed with the
reason (in place when the full update no longer fits); when not even that can be written, the line
says so and the next open marks the run interrupted. The disk is filled for real: the process's
file-size limit is lowered mid-run (tests/support/disk_fills.py)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[2]
REPLAY = ["replay", "--samples", "demo/data/eval.jsonl", "--index", "0", "--steps", "4"]


def _database_with_a_run(tmp_path: Path) -> str:
    db = str(tmp_path / "full.db")
    made = run_cli(*REPLAY, "--max-new-tokens", "8", "--db", f"sqlite:///{db}")
    assert made.returncode == 0, made.stderr[-2000:]
    return db


def _replay_until_the_disk_fills(db: str, mode: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "tests/support/disk_fills.py", mode, db, "30"]
    command += [*REPLAY, "--max-new-tokens", "1900", "--db", f"sqlite:///{db}"]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


def _error_lines(stderr: str) -> list[str]:
    lines = stderr.replace("\r", "\n").splitlines()
    assert not any("Traceback" in line for line in lines), stderr[-3000:]
    return [line for line in lines if "error" in line.lower() and "replay:" not in line]


def _stored(db: str) -> tuple[tuple, list[tuple]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        run = connection.execute(
            "SELECT status, error, output_ids, metrics FROM runs WHERE id = 2"
        ).fetchone()
        steps = connection.execute(
            "SELECT step_index, committed_ids FROM steps WHERE run_id = 2 ORDER BY step_index"
        ).fetchall()
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    return run, steps


def _whole_prefix(steps: list[tuple]) -> int:
    assert [index for index, _ in steps] == list(range(len(steps)))
    return sum(len(json.loads(committed)) for _, committed in steps)


def test_a_disk_that_fills_mid_replay_leaves_the_run_failed_with_its_steps(tmp_path):
    db = _database_with_a_run(tmp_path)
    done = _replay_until_the_disk_fills(db, "log")
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = _error_lines(done.stderr)
    # The limit applies to every file: the database's log is usually refused first, but on a loaded
    # machine an artifact part file can already be past the log's size. Both are a disk that filled.
    database_refused = line.startswith(f"error: database sqlite:///{db}: ") and "disk I/O error" in line
    artifact_refused = line.startswith(f"error: {tmp_path}/artifacts/") and "File too large" in line
    assert database_refused or artifact_refused, line
    (status, error, output_ids, metrics), steps = _stored(db)
    assert status == "failed", (status, error)  # the old code left it 'running', with no error
    if database_refused:
        assert error.startswith("OperationalError: disk I/O error") and "the disk refused" in error
    else:
        assert "File too large" in error, error
    assert len(steps) >= 30
    # the partial output is the one the last committed batch stored: the prompt's first token and
    # exactly the tokens of the committed steps
    assert len(json.loads(output_ids)) == 1 + _whole_prefix(steps)
    if metrics is not None and json.loads(metrics):  # the full update fitted: metrics of those steps
        assert json.loads(metrics)["verify_steps"] == len(steps)


def test_a_run_that_cannot_even_be_marked_says_so_and_is_reaped_later(tmp_path):
    from backend.service.runs import list_runs

    db = _database_with_a_run(tmp_path)
    done = _replay_until_the_disk_fills(db, "nothing")
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = _error_lines(done.stderr)
    # as above: the database's log or, on a loaded machine, an artifact part file is refused first
    assert line.startswith((f"error: database sqlite:///{db}: ", f"error: {tmp_path}/artifacts/")), line
    assert "and run 2 could not be marked failed" in line and "marks it interrupted" in line
    (status, _, _, _), steps = _stored(db)
    assert status == "running" and len(steps) >= 30
    run = next(r for r in list_runs(f"sqlite:///{db}") if r.id == 2)  # an open reaps it
    assert run.status == "interrupted" and f"the {len(steps)} steps it committed" in run.error


def test_mark_in_place_fits_where_the_full_update_does_not(tmp_path):
    """The write-ahead log may not grow past what the database file and the log hold (the limit, as
    tests/support/disk_fills.py sets it in `log` mode): the full fail_run (the error with its trace,
    the output, the metrics) is refused, the in-place mark is written."""
    db = _database_with_a_run(tmp_path)
    script = f"""
import os, resource, sys
sys.path.insert(0, {str(REPO)!r})
from backend.service.database import open_database
from db import store
database = open_database("sqlite:///{db}")
with store.session_scope(database.factory) as session:
    run_id = store.create_run(session, kind="replay", target_path="t", draft_path="d", params={{}},
        aux_hf_indices=[1, 2, 3], given=store.RunInput([1, 2, 3], None, None))
limit = os.path.getsize("{db}-wal") + os.path.getsize("{db}")
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
try:
    with store.session_scope(database.factory) as session:
        store.fail_run(session, run_id, error="x" * 50000, output_ids=list(range(200000)))
    print("full update written")
except Exception as error:
    print("full update refused:", type(error).__name__)
store.mark_run_in_place(database.factory, run_id, status="failed", error="disk full " * 100)
print("wal", os.path.getsize("{db}-wal") == limit)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == ["full update refused: OperationalError", "wal True"]
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        status, error, finished = connection.execute(
            "SELECT status, error, finished_at FROM runs WHERE id = 2"
        ).fetchone()
    assert status == "failed" and finished is not None and len(error) == 500


def test_a_refused_write_is_one_line_naming_the_file_and_any_other_error_is_not():
    import errno

    from sqlalchemy.exc import OperationalError

    from backend.service.database import refusal

    full = OSError(errno.ENOSPC, "No space left on device", "/data/artifacts/7/parts/00003.partial")
    full.add_note("and run 7 could not be marked failed (disk I/O error)")
    assert refusal(full) == (
        "/data/artifacts/7/parts/00003.partial: No space left on device; "
        "and run 7 could not be marked failed (disk I/O error)"
    )
    locked = OperationalError("UPDATE runs SET ...", {}, Exception("database is locked\nmore"))
    assert refusal(locked, "sqlite:///x.db") == "database sqlite:///x.db: database is locked"
    # a path that cannot be read or written as asked is named (the battery's unreadable files)
    assert refusal(OSError(errno.EACCES, "Permission denied", "x")) == "x: Permission denied"
    assert refusal(OSError(errno.EACCES, "Permission denied")) is None  # no file to name
    assert refusal(OSError(errno.EIO, "Input/output error", "x")) is None
    assert refusal(ValueError("no")) is None
