"""The CLI rows of the walk (issue 65 row 16): the program names itself as the user called it, `lint` can
gate a CI job (`--fail-on`, exit 3 like the other gate), `lint --llamacpp` defaults its Hugging Face pair
like every command that loads one, and evaluate's table names the runs `lost --runs` takes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from backend.run.run_value import id_ranges
from tests.support.cli import REPO, run_cli

CLEAN = "llama-server -m t.gguf -md d.gguf --spec-type draft-eagle3 --spec-draft-n-max 4"
REMOVED = "llama-server -m t.gguf -md d.gguf --spec-type draft-eagle3 --draft-max 4"


def test_the_console_script_is_named_as_called():
    script = REPO / ".venv" / "bin" / "speclens"
    if not script.is_file():
        pytest.skip("no console script in .venv (the README's install makes it)")
    done = subprocess.run([str(script), "export", "--run", "0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("speclens export: error: argument --run")
    module = subprocess.run(
        [sys.executable, "-m", "backend", "export", "--run", "0"], cwd=REPO, capture_output=True, text=True
    )
    assert module.stderr.startswith("python -m backend export: error:")


def test_lint_fails_a_ci_gate_only_when_asked():
    assert run_cli("lint", "--llamacpp", REMOVED).returncode == 0  # the contract: findings are not a failure
    failed = run_cli("lint", "--llamacpp", REMOVED, "--fail-on", "error")
    assert (
        failed.returncode == 3
        and "gate failed: 1 finding(s) at --fail-on error or worse: removed-flag" in failed.stderr
    )
    assert run_cli("lint", "--llamacpp", CLEAN, "--fail-on", "warning").returncode == 0


def test_the_llamacpp_lint_defaults_its_pair():
    done = run_cli("lint", "--llamacpp", CLEAN, "--json")
    assert done.returncode == 0, done.stderr


def test_run_ids_are_written_as_lost_runs_reads_them():
    from backend.cli.flags import run_ids

    assert id_ranges([9, 3, 4, 5, 12, 11]) == "3-5,9,11-12"
    assert run_ids(id_ranges([9, 3, 4, 5, 12, 11])) == [3, 4, 5, 9, 11, 12]
