"""Run export: the steps as CSV or Parquet, the whole run as JSON; all read back as stored."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import REPO


def test_export_formats_round_trip(stored_run, tmp_path):
    import pandas as pd

    from db import store
    from db.export import ExportError, export_run

    url, run_id = stored_run
    factory = store.session_factory(store.make_engine(url))
    with store.session_scope(factory) as session:
        steps = store.get_steps(session, run_id)
    csv = pd.read_csv(export_run(factory, run_id, "csv", tmp_path / "r.csv"))
    assert csv["accepted_count"].tolist() == [s.accepted_count for s in steps]
    assert [json.loads(v) for v in csv["drafted_ids"]] == [s.drafted_ids for s in steps]
    assert csv["drafted_count"].tolist() == [len(s.drafted_ids) for s in steps]
    document = json.loads(export_run(factory, run_id, "json", tmp_path / "r.json").read_text())
    assert (
        document["id"] == run_id
        and len(document["steps"]) == len(steps)
        and "mean_accept_length" in document["metrics"]
    )
    assert "aux_features" not in document["steps"][0] and document["created_at"]
    parquet = pd.read_parquet(export_run(factory, run_id, "parquet", tmp_path / "sub" / "r.parquet"))
    assert parquet["bonus_id"].tolist() == [s.bonus_id for s in steps]
    with pytest.raises(ExportError, match="no run"):
        export_run(factory, 999, "csv", tmp_path / "x.csv")
    with pytest.raises(ExportError, match="unknown format"):
        export_run(factory, run_id, "xlsx", tmp_path / "x.xlsx")


def test_export_to_a_file_from_either_backend(any_db_url, tmp_path):
    """A run written to SQLite or PostgreSQL exports the same files (its JSON columns, a step's
    tree, the timestamps)."""
    import pandas as pd

    from db import store
    from db.export import export_run
    from tests.db.test_store import step

    factory = store.session_factory(store.make_engine(any_db_url))
    with store.session_scope(factory) as session:
        run_id = store.create_run(
            session,
            kind="replay",
            target_path="t",
            draft_path="d",
            params={"num_steps": 2, "wiring": {"aux": [0, 2, 4]}},
            aux_hf_indices=[0, 2, 4],
            given=store.RunInput([1, 2, 3]),
        )
        store.add_steps(session, run_id, [step(i, a) for i, a in enumerate([2, 0, 1])])
        store.finish_run(session, run_id, output_ids=[12, 9, 9, 11], metrics={"mean_accept_length": 2.0})
    document = json.loads(export_run(factory, run_id, "json", tmp_path / "r.json").read_text())
    assert document["params"] == {"num_steps": 2, "wiring": {"aux": [0, 2, 4]}} and document["finished_at"]
    assert [s["tree"]["decisions"] for s in document["steps"]] == [step(0, 2).tree.decisions] * 3
    csv = pd.read_csv(export_run(factory, run_id, "csv", tmp_path / "r.csv"))
    assert [json.loads(v) for v in csv["draft_top_ids"]] == [[[1, 2], [3, 4]]] * 3
    parquet = pd.read_parquet(export_run(factory, run_id, "parquet", tmp_path / "r.parquet"))
    assert parquet["accepted_count"].tolist() == [2, 0, 1]
    assert json.loads(parquet["tree"][0])["parents"] == [-1, 0, -1]
    factory.kw["bind"].dispose()


@pytest.mark.slow
def test_the_cli_exports_a_run_from_postgresql(postgres_url, tmp_path):
    from db import store
    from tests.support.cli import run_cli

    factory = store.session_factory(store.make_engine(postgres_url))
    with store.session_scope(factory) as session:
        run_id = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[0]
        )
        store.finish_run(session, run_id, output_ids=[4], metrics={"mean_accept_length": 1.0})
    factory.kw["bind"].dispose()
    out = tmp_path / "run.json"
    plain = postgres_url.replace("postgresql+psycopg://", "postgresql://")  # as a user writes it
    result = run_cli("export", "--run", str(run_id), "--format", "json", "--out", str(out), "--db", plain)
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text())["output_ids"] == [4]


def _on_a_read_only_mount(folder, *command: str) -> subprocess.CompletedProcess:
    """`command` in a private mount namespace where `folder` is bind-mounted read-only onto itself:
    a read-only share, as even root cannot write it (chmod alone does not stop root)."""
    mounted = f"mount --bind -o ro {shlex.quote(str(folder))} {shlex.quote(str(folder))} && "
    script = mounted + " ".join(shlex.quote(part) for part in command)
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def test_a_read_only_database_is_read_and_refuses_writes_in_one_line(stored_run, tmp_path):
    """Issue 44: `export` from a database this process cannot write ended in exit 2 'cannot open the
    database': reading a run needed write access. Reads work on a read-only file or share; a write is
    refused with one line naming the database."""
    import shutil

    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"]).returncode != 0:
        pytest.skip("needs a private mount namespace (unshare -m) to make a read-only share")
    import sqlite3

    source, run_id = stored_run
    folder = tmp_path / "share"
    folder.mkdir()
    # the database alone, as a finished one on a share is: no -wal or -shm beside it for SQLite to use
    with sqlite3.connect(source[len("sqlite:///") :]) as live, sqlite3.connect(folder / "s.db") as copy:
        live.backup(copy)
    url = f"sqlite:///{folder / 's.db'}"
    out = tmp_path.parent / f"{tmp_path.name}-export.json"  # outside the read-only folder
    backend = [sys.executable, "-m", "backend"]
    done = _on_a_read_only_mount(
        folder, *backend, "export", "--run", str(run_id), "--db", url, "--format", "json", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    assert document["id"] == run_id and document["steps"] and document["status"] == "finished"
    write = _on_a_read_only_mount(
        folder,
        *backend,
        "import",
        "--samples",
        "demo/data/eval.jsonl",
        "--db",
        url,
        "--target",
        "demo/target",
    )
    assert write.returncode == 2 and write.stderr.count("\n") == 1, write.stderr
    assert "readonly database" in write.stderr and str(folder) in write.stderr
    _read_by_another_user(folder / "s.db", run_id, backend)


def _read_by_another_user(database, run_id: int, backend: list[str]) -> None:
    """Issue 58 row 19: a database file of mode 0444 in a folder anyone may write, opened by a user who
    does not own it: `export` reads it, a write is refused in one line. Root ignores file modes, so as
    root the commands run as `nobody` (setpriv); skipped where neither is possible."""
    import os
    import shutil
    import tempfile

    as_user = []
    if os.getuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: cannot open the file as another user")
        as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    folder = Path(tempfile.mkdtemp(prefix="speclens-0444-"))
    try:
        folder.chmod(0o1777)  # a shared folder: anyone may make files in it (SQLite's -shm)
        copy = folder / "s.db"
        shutil.copyfile(database, copy)
        copy.chmod(0o444)
        url, out = f"sqlite:///{copy}", folder / "export.json"
        env = {**os.environ, "HOME": str(folder)}
        export = [
            *backend,
            "export",
            "--run",
            str(run_id),
            "--db",
            url,
            "--format",
            "json",
            "--out",
            str(out),
        ]
        done = subprocess.run(
            [*as_user, *export], cwd=REPO, capture_output=True, text=True, env=env, timeout=300
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(out.read_text())["id"] == run_id
        write = [
            *backend,
            "import",
            "--samples",
            "demo/data/eval.jsonl",
            "--db",
            url,
            "--target",
            "demo/target",
        ]
        refused = subprocess.run(
            [*as_user, *write], cwd=REPO, capture_output=True, text=True, env=env, timeout=300
        )
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert "readonly database" in refused.stderr and str(copy) in refused.stderr
    finally:
        shutil.rmtree(folder, ignore_errors=True)
