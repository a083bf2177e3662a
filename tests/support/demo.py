"""Facts of the bundled demo that tests assert on, read from its files rather than written down twice."""

from __future__ import annotations

import json

from backend.defaults import DEMO, DEMO_DRAFTS, DEMO_TARGET
from backend.run.wiring import default_hf_indices


def demo_wiring() -> tuple[list[int], list[int]]:
    """(HF indices `miswired` was trained on, HF indices its config declares: the defaults)."""
    trained = json.loads((DEMO_DRAFTS / "miswired" / "TRAINED_WIRING.json").read_text())["aux_hf_indices"]
    layers = json.loads((DEMO_TARGET / "config.json").read_text())["num_hidden_layers"]
    return trained, default_hf_indices(layers)


def feature_file_size(name: str) -> tuple[int, int]:
    """(tokens, target hidden size) of the bundled feature file demo/data/features/`name`."""
    import torch

    tokens = len(torch.load(DEMO / "data" / "features" / name, weights_only=True)["input_ids"])
    return tokens, json.loads((DEMO_TARGET / "config.json").read_text())["hidden_size"]
