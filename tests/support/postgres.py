"""A throwaway PostgreSQL server for the tests: `initdb` into a temporary folder, `pg_ctl start` on a
free localhost port (its unix socket in that folder too), one fresh database per test, stopped and
removed at the end. The server binaries come from Debian's `postgresql` package
(/usr/lib/postgresql/<version>/bin, which tests/run.sh installs) or from PATH / SPECLENS_PG_BIN.
As root the server runs as the `postgres` user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import atexit
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

SUPERUSER = "speclens"  # the cluster's superuser; trust authentication, localhost only
START_TIMEOUT_S = 60


def server_bin() -> Path | None:
    """The folder holding initdb, pg_ctl and postgres: SPECLENS_PG_BIN, else Debian's newest
    /usr/lib/postgresql/<version>/bin, else the one on PATH."""
    candidates = []
    if os.environ.get("SPECLENS_PG_BIN"):
        candidates.append(Path(os.environ["SPECLENS_PG_BIN"]))
    debian = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    debian.sort(
        key=lambda path: int(Path(path).parent.parent.name) if Path(path).parent.parent.name.isdigit() else 0
    )
    candidates += [Path(path).parent for path in reversed(debian)]
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for folder in candidates:
        if all((folder / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


def missing_reason() -> str | None:
    """Why no server can be started here (the tests skip with it), or None."""
    if server_bin() is None:
        return (
            "PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin/initdb, no initdb on "
            "PATH, no SPECLENS_PG_BIN); install Debian's postgresql package (tests/run.sh does)"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the PostgreSQL server as"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    """One running cluster. `url(name)` / `create_database()` give SQLAlchemy URLs on it."""

    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="speclens-pg-"))  # short: the socket path has a limit
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        self.running = False
        self._names = itertools.count(1)
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
        os.chmod(self.root, 0o700)

    @classmethod
    def start_new(cls) -> PostgresServer:
        reason = missing_reason()
        if reason:
            raise RuntimeError(reason)
        server = cls(server_bin())
        try:
            server.start()
        except BaseException:
            server.stop()
            raise
        atexit.register(server.stop)  # also when the session dies before its fixtures finalise
        return server

    def _run(self, *args: str, timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=self.root)

    def start(self) -> None:
        made = self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            SUPERUSER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        if made.returncode != 0:
            raise RuntimeError(f"initdb failed ({made.returncode}): {(made.stderr or made.stdout).strip()}")
        for _attempt in range(3):  # a port picked free can be taken before the server binds it
            self.port = free_port()
            options = (
                f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=300 "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=32MB"
            )
            started = self._run(
                "pg_ctl",
                "start",
                "-w",
                "-t",
                str(START_TIMEOUT_S),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-o",
                options,
                timeout=START_TIMEOUT_S + 10,
            )
            if started.returncode == 0:
                self.running = True
                return
        log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
        raise RuntimeError(f"pg_ctl start failed: {(started.stderr or started.stdout).strip()}\n{log}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; its SQLAlchemy URL."""
        import psycopg

        name = name or f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres", autocommit=True
        ) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.running:
            self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w", timeout=60)
            self.running = False
        shutil.rmtree(self.root, ignore_errors=True)
