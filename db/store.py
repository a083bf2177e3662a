"""The store's one front door: `from db import store; store.create_run(...)`.

Each repository lives in a module of its own (connection, runs, datasets, observations, probes); this module
only names them, so callers keep one import. Repository functions take a session from the caller and
return plain dataclasses, never ORM objects."""

from __future__ import annotations

from db.connection import (
    DEFAULT_DB_PATH,
    artifact_root,
    database_url,
    make_engine,
    session_factory,
    session_scope,
    strict_json,
)
from db.datasets import (
    DatasetInfo,
    create_dataset,
    create_dataset_streaming,
    delete_dataset,
    get_samples,
    list_datasets,
    sample_datasets,
    sample_sources,
)
from db.models import utc_now
from db.observations import (
    add_observation,
    list_observations,
    remember_checkpoint,
    remembered_checkpoints,
)
from db.probes import add_probe, largest_probe
from db.runs import (
    NO_INPUT,
    STALE_AFTER_S,
    RunBusy,
    RunGone,
    RunInfo,
    RunInput,
    add_steps,
    add_token_stats,
    create_run,
    delete_run,
    delete_token_stats,
    fail_run,
    finish_run,
    get_run,
    get_steps,
    get_token_stats,
    list_runs,
    mark_run_in_place,
    reap_stale_runs,
    run_info,
    set_artifact,
    token_stat_references,
    write_run_batch,
)

__all__ = [
    "add_probe",
    "largest_probe",
    "sample_datasets",
    "sample_sources",
    "DEFAULT_DB_PATH",
    "DatasetInfo",
    "NO_INPUT",
    "RunBusy",
    "RunGone",
    "RunInfo",
    "RunInput",
    "STALE_AFTER_S",
    "add_observation",
    "add_steps",
    "add_token_stats",
    "artifact_root",
    "create_dataset",
    "create_dataset_streaming",
    "create_run",
    "database_url",
    "delete_dataset",
    "delete_run",
    "delete_token_stats",
    "fail_run",
    "finish_run",
    "get_run",
    "get_samples",
    "get_steps",
    "get_token_stats",
    "list_datasets",
    "list_observations",
    "list_runs",
    "make_engine",
    "mark_run_in_place",
    "reap_stale_runs",
    "run_info",
    "remember_checkpoint",
    "remembered_checkpoints",
    "session_factory",
    "session_scope",
    "set_artifact",
    "strict_json",
    "token_stat_references",
    "utc_now",
    "write_run_batch",
]
