"""The `speclens` CLI run as users run it: `python -m backend ...` in a subprocess, from the repository."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "backend", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def cli_json(*args: str, timeout: float = 600) -> dict:
    """The command's --json object; the command must succeed."""
    done = run_cli(*args, "--json", timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)
