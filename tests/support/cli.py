"""The `speclens` CLI as users run it, in this test process: `backend.cli.main(argv)` from the repository
root with its standard output and error captured, the loaded models kept between calls
(backend/service/models.py reloads a directory whose files changed). Exit codes, printed lines and
JSON are the contract's; argparse's own exits (a bad flag: 2) are caught as the process would end.
The few tests whose subject is a process (signals, kills, what a fresh interpreter imports) start one
themselves."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m backend *args`, run in this process."""
    from backend.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(REPO), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse: --help, a bad flag
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    return subprocess.CompletedProcess(["speclens", *args], code, out.getvalue(), err.getvalue())


def cli_json(*args: str) -> dict:
    """The command's --json object (in process); the command must succeed."""
    done = run_cli(*args, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)
