"""SpecLens backend, in layers; each imports only the layers below it (tests/test_architecture.py
checks this):

    backend.engine       the algorithm (torch, transformers): records, draft_config, draft_model,
                         kv_cache, wiring, capture, layouts, loading, preflight, replay, teacher, metrics
    backend.data         files in, validated samples out: samples, features (.ckpt), importer
    backend.diagnostics  one question per file, engine objects in, a report out: probe, hidden_diff,
                         doctor, agreement, whatif, lint, mismatch
    backend.service      the only layer that touches db/ and threads: requests, jobs, models,
                         database, datasets, runs, references, checks, tasks
    backend.cli          argparse over the service (`python -m backend`)

engine <- data <- diagnostics <- service <- cli / pages. Only `backend.service` and `backend.cli`
import `db` (db itself imports only the torch-free record types `backend.engine.records` and
`backend.data.samples`). Only `pages/` and `ui/` import streamlit; pages and ui never import torch
or transformers (directly or through what they import) and define no work that touches a model:
they build requests and call `backend.service`. The reference the code cites is docs/reference.md.
"""


class BadInput(ValueError):
    """The user's input (paths, files, flags, checkpoints) cannot be used; the message says why."""


def first_line(error: BaseException | str) -> str:
    """The first non-blank line of an error's message, else its type's name (an EOFError or a
    KeyError may carry no message at all)."""
    for line in str(error).splitlines():
        if line.strip():
            return line.strip()
    return type(error).__name__ if isinstance(error, BaseException) else ""


class Terminated(KeyboardInterrupt):
    """SIGTERM (timeout, systemd, docker stop): a replay ends as interrupted, like Ctrl-C."""
