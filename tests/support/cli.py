"""The `speclens` CLI as users run it, in this test process: `backend.cli.main(argv)` from the repository
root with its standard output and error captured, the loaded models kept between calls
(backend/service/models.py reloads a directory whose files changed). Exit codes, printed lines and
JSON are the contract's; argparse's own exits (a bad flag: 2) are caught as the process would end.

`spawn_cli` runs `python -m backend` in a real process: for the few tests whose subject is a process
(signals, kills, what a fresh interpreter imports)."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`python -m backend *args`, run in process; `timeout` is kept for callers' symmetry with
    `spawn_cli` and is not enforced here (pytest's own session limit applies)."""
    from backend.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(REPO), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse: --help, a bad flag
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    return subprocess.CompletedProcess(["speclens", *args], code, out.getvalue(), err.getvalue())


def spawn_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m backend *args` in a new process, from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "backend", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def cli_json(*args: str, timeout: float | None = None) -> dict:
    """The command's --json object (in process); the command must succeed."""
    done = run_cli(*args, "--json", timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)
