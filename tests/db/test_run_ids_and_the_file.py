"""A run id means one run forever (a deleted run's id is never handed out again, on SQLite and on
PostgreSQL, and deleting a run removes its files), and the SQLite file alone holds every committed
run, while the store is open and after the process that wrote it ends (issue 65 rows 2 and 4)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from backend.service import runs as stored_runs
from backend.service.database import open_database
from db import schema, store

ROOT = Path(__file__).resolve().parents[2]


def _new_run(url: str) -> int:
    """A finished run (a running one with a live writer cannot be deleted)."""
    with store.session_scope(open_database(url).factory) as session:
        run_id = store.create_run(
            session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[1, 2, 3]
        )
        store.finish_run(session, run_id, output_ids=[1], metrics={})
        return run_id


def test_a_deleted_runs_id_is_never_handed_out_again_and_its_files_go(any_db_url):
    import torch  # collecting the tests loads no torch (tests/test_architecture.py)

    from db.artifacts import write_artifact

    first, newest = _new_run(any_db_url), _new_run(any_db_url)
    folder = open_database(any_db_url).artifact_dir / str(newest)
    write_artifact(folder, "hidden_states", {"x": torch.zeros(2)})
    assert stored_runs.delete_run(any_db_url, newest)
    assert not folder.exists()  # its hidden states went with it
    again = _new_run(any_db_url)
    assert again > newest > first  # the deleted largest id is not the next run's
    assert stored_runs.get_run(any_db_url, newest) is None


def test_an_older_sqlite_database_keeps_ids_its_deleted_runs_left_files_for(tmp_path):
    """A version-5 database whose run 7 was deleted before this fix (its folder left behind): the
    upgrade seeds the ids past the folder, so the next run is not a second run 7."""
    path = tmp_path / "old.db"
    engine = store.make_engine(f"sqlite:///{path}")
    with store.session_scope(store.session_factory(engine)) as session:
        for _ in range(6):
            store.create_run(
                session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[]
            )
    engine.dispose()
    with sqlite3.connect(path) as connection:  # back to revision 0005: no run_ids table
        connection.execute("DROP TABLE run_ids")
        connection.execute("UPDATE alembic_version SET version_num = '0005'")
        connection.execute("UPDATE speclens_schema SET version = 5")
    (tmp_path / "artifacts" / "7").mkdir(parents=True)
    engine = store.make_engine(f"sqlite:///{path}")
    with store.session_scope(store.session_factory(engine)) as session:
        assert (
            store.create_run(
                session, kind="replay", target_path="t", draft_path="d", params={}, aux_hf_indices=[]
            )
            == 8
        )
    engine.dispose()


def _header_journal(path: Path) -> str:
    """The journal mode the file's own header declares (bytes 18-19: 1 rollback, 2 WAL)."""
    return {1: "rollback", 2: "wal"}[path.read_bytes()[18]]


def _runs_in_copy_of(path: Path, where: Path) -> int:
    where.mkdir()
    copy = where / "copy.db"
    shutil.copyfile(path, copy)  # the file alone, as a user copies or mails it
    with sqlite3.connect(copy) as connection:
        return connection.execute("SELECT count(*) FROM runs").fetchone()[0]


def test_the_file_alone_holds_every_committed_run_while_the_store_is_open(tmp_path):
    url = f"sqlite:///{tmp_path / 'open.db'}"
    for _ in range(3):
        _new_run(url)
    assert _runs_in_copy_of(tmp_path / "open.db", tmp_path / "copy") == 3


def test_when_a_command_ends_the_file_is_whole_and_standalone(tmp_path):
    path = tmp_path / "good.db"
    script = (
        "from backend.service.database import open_database; from db import store\n"
        f"database = open_database('sqlite:///{path}')\n"
        "for _ in range(2):\n"
        "    with store.session_scope(database.factory) as session:\n"
        "        store.create_run(session, kind='replay', target_path='t', draft_path='d', params={}, aux_hf_indices=[])\n"
        "assert (database.artifact_dir.parent / 'good.db-wal').exists()  # WAL while it runs\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert not Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists()
    assert _header_journal(path) == "rollback"  # opens read-only anywhere: nothing to write beside it
    assert _runs_in_copy_of(path, tmp_path / "copy") == 2
    read_only = tmp_path / "shared"
    read_only.mkdir()
    shutil.copyfile(path, read_only / "good.db")
    os.chmod(read_only / "good.db", 0o444)
    with sqlite3.connect(f"file:{read_only / 'good.db'}?mode=ro", uri=True) as connection:
        assert connection.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
    assert schema.stored_version(store.make_engine(f"sqlite:///{path}")) == schema.SCHEMA_VERSION


def test_a_file_another_process_still_uses_is_left_in_wal(tmp_path):
    """The switch back to a rollback journal is only made by the file's last user (SQLite refuses
    it while another connection is open): the one still open keeps working, and settles it later."""
    path = tmp_path / "shared.db"
    url = f"sqlite:///{path}"
    _new_run(url)  # this process keeps the file open
    script = (
        "from backend.service.database import open_database; from db import store\n"
        f"database = open_database('{url}')\n"
        "with store.session_scope(database.factory) as session:\n"
        "    store.create_run(session, kind='replay', target_path='t', draft_path='d', params={}, aux_hf_indices=[])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert _header_journal(path) == "wal"
    assert _new_run(url) == 3  # still usable here
    assert _runs_in_copy_of(path, tmp_path / "copy") == 3
