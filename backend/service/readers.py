"""Reads the dashboard needs that take torch or transformers (a draft's tensors, a tokenizer), done in
a process of their own so that the Streamlit server imports neither (tests/test_torch_free.py).

The reader is a second worker (backend/service/worker.py), apart from the one that runs replays: a
page's quick read never waits behind a long job. Its results are small and plain; callers cache them
by the files read and their modification times (`stamp`), so a file changed on disk is read again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backend import BadInput
from backend.run.records import no_progress
from backend.service.worker import JobFailed, Worker

READER = Worker("speclens-reader")


def in_reader(job: Callable, *args) -> Any:
    """job(*args, progress=...) in the reader process; its BadInput comes back as a BadInput."""
    try:
        return READER.run(job, args, {}, no_progress)
    except JobFailed as error:
        if error.bad_input:
            raise BadInput(str(error)) from None
        raise
