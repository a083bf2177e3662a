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

import threading

_GUARD = threading.Lock()
_THREAD: threading.Thread | None = None


def _import_model_stack() -> None:
    import backend.engine.preflight  # noqa: F401 - torch, transformers and the engine, once


def start() -> None:
    """Start the import (once per process); returns at once."""
    global _THREAD
    with _GUARD:
        if _THREAD is None:
            _THREAD = threading.Thread(target=_import_model_stack, name="speclens-warm-imports", daemon=True)
            _THREAD.start()
