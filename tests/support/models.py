"""Builders of the tiny models the tests share (used by tests/conftest.py's fixtures).

Drafts are loaded the way the service loads them: read once, preflight-checked against the loaded
target, then built (`backend.engine.preflight.load_checked_draft`); the wiring is the one the
preflight resolved. torch, transformers and backend.engine are imported inside the functions, so
importing this module (for TRAINED, say) at collection time costs nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from backend.data.samples import Sample

if TYPE_CHECKING:
    from backend.engine.draft_model import Eagle3Draft
    from backend.engine.loading import Target
    from backend.run.wiring import Wiring


def load_draft(draft_dir, target: Target, aux_hf_indices=None) -> tuple[Eagle3Draft, Wiring]:
    """(draft, the wiring it is fed): the declared one, or `aux_hf_indices` (HF) when given."""
    from backend.engine.preflight import load_checked_draft

    draft, report = load_checked_draft(draft_dir, target, aux_hf_indices)
    return draft, report.wiring


@dataclass
class Pair:
    name: str
    target: Target
    draft: Eagle3Draft
    wiring: Wiring
    target_dir: Path
    draft_dir: Path
    config: dict


@dataclass(frozen=True)
class PairSpec:
    """A test pair: the random target's size, and a draft that is random or a copy of the target
    (`draft_kind`), in `layout`."""

    num_layers: int
    hidden: int
    vocab: int
    draft_kind: str  # "random" | "copy"
    layout: str = "specforge"
    draft_vocab: int | None = None
    attention_scale: float = 1.0
    eos_token_id: int | None = None
    aux_ids: list[int] | None = None


PAIR_SPECS = {
    "random-L2": PairSpec(2, 32, 96, "random", draft_vocab=48, eos_token_id=7, aux_ids=[0, 0, 1]),
    "random-L6-eagle": PairSpec(6, 48, 128, "random", layout="eagle", draft_vocab=64),
    "copy-L4-bigram": PairSpec(4, 128, 32, "copy", attention_scale=0.0),
    "copy-L5-context": PairSpec(5, 128, 32, "copy", layout="speculators", attention_scale=0.03),
}


def build_pair(root: Path, name: str, spec: PairSpec) -> Pair:
    from backend.engine.loading import load_target
    from tests.support.synthetic import (
        TargetShape,
        copy_draft_tensors,
        draft_config_dict,
        make_target,
        random_draft_tensors,
        save_draft,
    )

    target_dir, draft_dir = root / f"{name}-target", root / f"{name}-draft"
    layers, layout, aux_ids = spec.num_layers, spec.layout, spec.aux_ids
    shape = TargetShape(
        num_layers=layers, hidden=spec.hidden, vocab=spec.vocab, eos_token_id=spec.eos_token_id
    )
    model = make_target(target_dir, shape, seed=layers, attention_scale=spec.attention_scale)
    if spec.draft_kind == "copy":  # third aux chunk must be HF index L (pre-norm output of the last layer)
        aux_ids = [1, 2, layers] if layout == "speculators" else [0, 1, layers - 1]
    config = draft_config_dict(model.config, draft_vocab=spec.draft_vocab, layout=layout, aux_ids=aux_ids)
    copied = spec.draft_kind == "copy"
    tensors = copy_draft_tensors(model, config) if copied else random_draft_tensors(config)
    save_draft(draft_dir, config, tensors, layout)
    target = load_target(target_dir, device="cpu", dtype="fp32")
    draft, wiring = load_draft(draft_dir, target)
    return Pair(name, target, draft, wiring, target_dir, draft_dir, config)


# ----------------------------------------------------------------------------- bigram diagnostics

TRAINED = [0, 2, 4]  # HF indices the bigram drafts were "trained" on (their fc reads chunk 0 only)


@dataclass
class BigramSetup:
    root: Path  # target/, right/ (declares TRAINED), miswired/ (declares the defaults HF [2, 4, 5])
    target: Target
    samples: list[Sample]

    @property
    def target_dir(self) -> Path:
        return self.root / "target"


def build_bigram_setup(root: Path) -> BigramSetup:
    import torch

    from backend.engine.loading import load_target
    from tests.support.synthetic import (
        TargetShape,
        bigram_draft_tensors,
        corrupt_next_token_map,
        cyclic_next_token_map,
        draft_config_dict,
        make_bigram_target,
        save_draft,
    )

    follow = cyclic_next_token_map(48, seed=3)
    shape = TargetShape(num_layers=8, hidden=64, heads=4, kv_heads=2, intermediate=96)
    model = make_bigram_target(root / "target", follow, shape)
    believed = corrupt_next_token_map(follow, 0.2, seed=4)
    right = draft_config_dict(model.config, aux_ids=[i - 1 for i in TRAINED])  # nested ids declare [0, 2, 4]
    wrong = draft_config_dict(model.config, aux_ids=[1, 3, 4])  # declares the defaults HF [2, 4, 5]
    tensors = bigram_draft_tensors(model, right, believed)
    save_draft(root / "right", right, tensors)
    save_draft(root / "miswired", wrong, tensors)
    target = load_target(root / "target", device="cpu", dtype="fp32")
    generator = torch.Generator().manual_seed(0)
    samples = []
    for number in range(4):
        start = int(torch.randint(48, (1,), generator=generator))
        ids = [start]
        for _ in range(39):
            ids.append(follow[ids[-1]])
        samples.append(Sample(ids, [0] * 8 + [1] * 32, 8, source=f"s{number % 2}"))
    return BigramSetup(root, target, samples)


def write_samples(path: Path, samples: list[Sample]) -> Path:
    """Samples as training JSONL (what --samples reads)."""
    path.write_text(
        "".join(
            json.dumps({"input_ids": s.input_ids, "loss_mask": s.loss_mask, "n_prompt_tokens": s.prompt_len})
            + "\n"
            for s in samples
        )
    )
    return path
