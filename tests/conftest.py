"""Shared fixtures: tiny random-init targets and drafts, built once per test session in a temporary
directory, and a context-free (bigram) target with drafts "trained" on a known wiring.

Nothing heavy is imported at collection time: torch, transformers and backend.engine are imported
inside the fixtures that need them (tests/support/models.py builds the models).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# One intra-op thread for torch (read when torch is first imported, after this). The test models are
# a few dozen wide: a second thread saves nothing on them, and on a busy shared machine the OpenMP
# threads' spin-waits made them many times slower (test_readings' deepseek-v3 case: 222 s with the
# default threads vs 6 s with one, under a load of 12 on 2 cores). Subprocesses inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The toy pair is the suite's fast fixture: the defaults (backend/defaults.py) would otherwise pick the
# real SmolLM2 pair wherever tests/run.sh has set it up. Tests of that choice clear it. Subprocesses too.
os.environ["SPECLENS_DEMO"] = "toy"


# The files that take longest, collected first. tests/run.sh gives each xdist worker whole files
# (--dist loadfile); pytest-xdist 3.8 then queues the files by their number of tests, most first
# (--loadscope-reorder, its default), so this order decides only among files with as many tests. Measured
# 2026-12-07 on the warm machine (bench/TIMINGS.md): xdist's order 715 s, this list's order taken
# literally (--no-loadscope-reorder: both engines' files first, at once) 790 s; in xdist's order both
# workers ended within 3 s of each other. Read the 20 slowest tests tests/run.sh prints before a change.
LONGEST_FIRST = (
    "tests/real_engine/test_vllm.py",
    "tests/real_engine/test_llamacpp.py",
    "tests/test_browser.py",
    "tests/service/test_evaluate.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(
        key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank))
    )  # stable: the rest keep order


@pytest.fixture(scope="session", autouse=True)
def job_worker():
    """The job worker starts with the session, as the dashboard starts it with the server: it imports
    torch on the other core while the first tests run, and the first job finds it ready."""
    from backend.service.worker import WORKER

    WORKER.prestart()
    yield WORKER
    WORKER.stop()


@pytest.fixture(autouse=True)
def no_remembered_probe():
    """A wiring probe that a page test runs stays in this process's memory, as it would on a server
    (backend/service/kept_results.py, `remember_probe`). Without this fixture the verdict and the lint of a
    later test in the same process would read that probe. Each test starts with none remembered."""
    yield
    import sys

    kept = sys.modules.get("backend.service.kept_results")  # nothing to clear if it was never imported
    if kept is not None:  # and a verdict a test kept (the Diagnostics page shows it to the next test)
        kept._PROBES.clear()
        kept._VERDICTS.clear()


@pytest.fixture(scope="session")
def models_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def pairs(models_root) -> dict:
    """Targets of several depths with drafts that are wrong (random), right at d_1 (copy of a
    context-free target) and sometimes right (copy draft on a target whose attention matters).
    name -> tests.support.models.Pair."""
    from tests.support.models import PAIR_SPECS, build_pair

    return {name: build_pair(models_root, name, spec) for name, spec in PAIR_SPECS.items()}


@pytest.fixture(scope="session")
def bigram_setup(tmp_path_factory):
    """An 8-layer bigram target with drafts that read only the embedding chunk: `right` declares the
    wiring it was trained on (HF [0, 2, 4]), `miswired` declares the defaults HF [2, 4, 5].
    A tests.support.models.BigramSetup."""
    from tests.support.models import build_bigram_setup

    return build_bigram_setup(tmp_path_factory.mktemp("bigram"))


@pytest.fixture()
def db_url(tmp_path) -> str:
    """A fresh SQLite database URL in the test's temporary directory."""
    return f"sqlite:///{tmp_path / 'speclens.db'}"


@pytest.fixture()
def stored_run(pairs, db_url) -> tuple[str, int]:
    """A finished, recorded replay of the copy-L4-bigram pair (K=3, 12 tokens): (db_url, run id)."""
    from backend.run.request import ReplayRequest
    from backend.service.jobs import run_replay

    pair = pairs["copy-L4-bigram"]
    request = ReplayRequest(
        str(pair.target_dir), str(pair.draft_dir), prompt_ids=(1, 5, 9), num_steps=3, max_new_tokens=12
    )
    return db_url, run_replay(request, db_url).run_id


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL server for the whole session (tests/support/postgres.py), started on
    first use and stopped at the end; skipped only when the server binaries are absent (a failure
    instead under SPECLENS_REQUIRE_POSTGRES=1, which tests/run.sh sets after installing them)."""
    import os

    from tests.support.postgres import PostgresServer, missing_reason

    reason = missing_reason()
    if reason and os.environ.get("SPECLENS_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"SPECLENS_REQUIRE_POSTGRES=1 but {reason}")
    if reason:
        pytest.skip(reason)
    server = PostgresServer.start_new()
    yield server
    server.stop()


@pytest.fixture()
def postgres_url(postgres_server, tmp_path, monkeypatch) -> str:
    """A fresh database on the session's PostgreSQL server; artifacts go to the test's folder."""
    monkeypatch.setenv("SPECLENS_ARTIFACT_DIR", str(tmp_path / "artifacts"))
    return postgres_server.create_database()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def any_db_url(request, tmp_path) -> str:
    """A fresh database on each backend: a SQLite file, then a PostgreSQL database (slow: it starts
    the session's server; `-k postgresql` runs only those)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'speclens.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture(scope="session")
def dashboard(tmp_path_factory):
    """One Streamlit server on a fresh database and one Chromium for every browser walk of the session
    (tests/support/browser.py); the walks are one file, which one xdist worker runs, so it starts once."""
    from tests.support.browser import dashboard as serve

    with serve(tmp_path_factory.mktemp("dashboard")) as served:
        yield served
