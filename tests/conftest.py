"""Tiny random-init targets and drafts, built once per test session in a temporary directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from backend.checkpoints import Target, load_draft, load_target
from backend.draft_config import parse_draft_config
from backend.draft_model import Eagle3Draft
from backend.synthetic import (
    copy_draft_tensors,
    draft_config_dict,
    make_target,
    random_draft_tensors,
    save_draft,
)
from backend.wiring import Wiring, resolve_wiring


@dataclass
class Pair:
    name: str
    target: Target
    draft: Eagle3Draft
    wiring: Wiring
    target_dir: Path
    draft_dir: Path
    config: dict


def build_pair(root: Path, name: str, *, num_layers: int, hidden: int, vocab: int, draft_kind: str,
               layout: str = "specforge", draft_vocab: int | None = None, attention_scale: float = 1.0,
               eos_token_id: int | None = None, aux_ids: list[int] | None = None) -> Pair:
    target_dir, draft_dir = root / f"{name}-target", root / f"{name}-draft"
    model = make_target(target_dir, num_layers=num_layers, hidden=hidden, vocab=vocab,
                        attention_scale=attention_scale, eos_token_id=eos_token_id, seed=num_layers)
    if draft_kind == "copy":  # third aux chunk must be HF index L (pre-norm output of the last layer)
        aux_ids = [1, 2, num_layers] if layout == "speculators" else [0, 1, num_layers - 1]
    config = draft_config_dict(model.config, draft_vocab=draft_vocab, layout=layout, aux_ids=aux_ids)
    tensors = copy_draft_tensors(model, config) if draft_kind == "copy" else random_draft_tensors(config)
    save_draft(draft_dir, config, tensors, layout)
    target = load_target(target_dir, device="cpu", dtype="fp32")
    draft = load_draft(draft_dir, target)
    wiring = resolve_wiring(parse_draft_config(config), target.num_layers)
    return Pair(name, target, draft, wiring, target_dir, draft_dir, config)


@pytest.fixture(scope="session")
def models_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def pairs(models_root) -> dict[str, Pair]:
    """Targets of several depths with drafts that are wrong (random), right at d_1 (copy of a
    context-free target) and sometimes right (copy draft on a target whose attention matters)."""
    specs = {
        "random-L2": dict(num_layers=2, hidden=32, vocab=96, draft_kind="random", draft_vocab=48, eos_token_id=7,
                          aux_ids=[0, 0, 1]),
        "random-L6-eagle": dict(num_layers=6, hidden=48, vocab=128, draft_kind="random", layout="eagle",
                                draft_vocab=64),
        "copy-L4-bigram": dict(num_layers=4, hidden=128, vocab=32, draft_kind="copy", attention_scale=0.0),
        "copy-L5-context": dict(num_layers=5, hidden=128, vocab=32, draft_kind="copy", attention_scale=0.03,
                                layout="speculators"),
    }
    return {name: build_pair(models_root, name, **spec) for name, spec in specs.items()}
