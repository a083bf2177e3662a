"""Small random targets for the checkpoint tests (loading, preflight, draft model), built once."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def target_dirs(tmp_path_factory) -> dict[int, Path]:
    """Random Llama targets of 4 and 7 layers (hidden 32, vocab 80) by depth."""
    from tests.support.synthetic import TargetShape, make_target

    root = tmp_path_factory.mktemp("targets")
    for layers in (4, 7):
        make_target(root / f"L{layers}", TargetShape(num_layers=layers, hidden=32, vocab=80), seed=layers)
    return {layers: root / f"L{layers}" for layers in (4, 7)}
