"""Jobs for the worker-process tests: top-level functions, so the spawned worker imports them."""

from __future__ import annotations

import os
import resource
import signal


def answer(value, *, progress):
    progress(0.5, "half way")
    return value


def die(*, progress):
    progress(0.1, "about to be killed")
    os.kill(os.getpid(), signal.SIGKILL)


def exhaust_memory(limit_bytes: int, *, progress):
    """Allocate past an address-space limit set inside the worker (what an out-of-memory job does)."""
    old = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, old[1]))
    try:
        return len(bytearray(4 * limit_bytes))
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


def loaded(names: list[str], *, progress):
    """Which of these modules the worker had imported when this job arrived (the job imports none)."""
    import sys

    return {name: name in sys.modules for name in names}


def sleep(seconds: float, *, progress):
    """A job that keeps the worker busy (what a long replay does to the pages)."""
    import time

    progress(0.0, "sleeping")
    time.sleep(seconds)
    return seconds
