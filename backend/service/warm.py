"""The dashboard's model stack (torch, transformers, SpecLens's engine) imported once per server, in
a thread of its own.

Pages call into the engine at run time (preflight for the engines table, Home's demo story), so the
first such call imports torch and transformers inside a Streamlit script thread. Streamlit stops a
script thread by raising inside it when the user navigates or reruns: an import interrupted that way
leaves transformers half-initialised in sys.modules, and every later page then fails with
"cannot import name 'AutoConfig' from 'transformers'" (seen in the browser test, Home -> Samples).
Started here, the import runs where nothing interrupts it; a script thread that needs the modules
meanwhile waits on the import lock, and being stopped while waiting leaves nothing half-done."""

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
        import backend.engine.preflight  # noqa: F401 - torch, transformers and the engine, once
    except Exception as error:  # noqa: BLE001 - logged, then the import runs once more
        logging.getLogger(__name__).warning("importing the model stack failed once (%s); trying again", error)
        import backend.engine.preflight  # noqa: F401


def start() -> None:
    """Start the import (once per process); returns at once."""
    global _THREAD
    with _GUARD:
        if _THREAD is None:
            _THREAD = threading.Thread(target=_import_model_stack, name="speclens-warm-imports", daemon=True)
            _THREAD.start()
