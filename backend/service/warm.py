"""The dashboard's model stack (torch, transformers, SpecLens's engine) imported once per server, in
a thread of its own, and the job worker started beside it.

Two threads that import transformers at once can break it: its submodules load lazily, and when two
threads initialise overlapping ones in different orders, CPython's import deadlock avoidance hands
one of them a partially initialised module; every later page then fails with "cannot import name
'AutoConfig' from 'transformers'" (seen in the browser test, Samples' import while this thread was
still importing). So the import runs once, here, where nothing interrupts it, and a page waits for
it to finish (`wait`, with a spinner: ui/state.py) before it runs anything that needs the engine.
"""

from __future__ import annotations

import logging
import threading

_GUARD = threading.Lock()
_THREAD: threading.Thread | None = None


def _import_model_stack() -> None:
    """Import the stack; a first failure is tried once more. Streamlit inserts and removes the page's
    folder at sys.path[0] around every script run (its modified_sys_path); a removal while this
    thread's importlib.metadata walks sys.path can skip site-packages, and transformers' dependency
    check then says an installed package is missing (seen once in tests/pages: "No package metadata
    was found for accelerate"). The walk a moment later finds it."""
    try:
        _import_once()
    except Exception as error:  # noqa: BLE001 - logged, then the import runs once more
        logging.getLogger(__name__).warning("importing the model stack failed once (%s); trying again", error)
        _import_once()


def _import_once() -> None:
    import backend.engine.loading  # torch, transformers' Auto* classes
    import backend.engine.preflight  # noqa: F401 - the engine the pages call


def start() -> None:
    """Start the import (once per process) and the job worker, which imports the same stack in its
    own process (backend/service/worker.py); returns at once."""
    global _THREAD
    from backend.service.worker import WORKER

    with _GUARD:
        if _THREAD is None:
            WORKER.prestart()
            _THREAD = threading.Thread(target=_import_model_stack, name="speclens-warm-imports", daemon=True)
            _THREAD.start()


def ready() -> bool:
    """Whether the import has finished (or was never started in this process)."""
    return _THREAD is None or not _THREAD.is_alive()


def wait() -> None:
    """Block until the import has finished (at once when it has)."""
    if _THREAD is not None:
        _THREAD.join()
