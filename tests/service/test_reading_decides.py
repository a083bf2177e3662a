"""The reading asked for decides, not the training reading guessed from the config: a draft EAGLE (the
training reading of a LlamaForCausalLM draft) cannot load is still preflighted and replayed as the engines
that serve it read it (issue 57: Nebius's published gpt-oss-20b EAGLE-3 config)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def target_dirs(tmp_path_factory) -> dict[int, Path]:
    from tests.support.synthetic import TargetShape, make_target

    root = tmp_path_factory.mktemp("targets")
    make_target(root / "L4", TargetShape(num_layers=4, hidden=32, vocab=80), seed=4)
    return {4: root / "L4"}


def nebius_like(tmp_path: Path, target_dir: Path) -> Path:
    """Nebius's published gpt-oss-20b EAGLE-3 config at a small size: LlamaForCausalLM, head_dim 16 where
    hidden / heads is 4 (Nebius: 16 where 8), YaRN rope, a draft vocabulary: EAGLE (the training reading guessed from the
    architecture) refuses the head_dim; vLLM and llama.cpp load it."""
    from tests.support.synthetic import random_draft_tensors, save_draft

    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
        "intermediate_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16,
        "num_hidden_layers": 1, "vocab_size": 80, "draft_vocab_size": 40, "rms_norm_eps": 1e-6,
        "max_position_embeddings": 2048, "hidden_act": "silu", "rope_theta": 150000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512},
        "target_hidden_size": 32,
    }  # fmt: skip
    return save_draft(tmp_path / "nebius", config, random_draft_tensors(config, seed=3))


def test_the_training_readings_refusal_does_not_stop_an_engine_that_serves_the_draft(tmp_path, target_dirs):
    from backend import BadInput
    from backend.engine.preflight import preflight
    from backend.run.request import ReplayRequest
    from backend.service.jobs import run_replay

    target = target_dirs[4]
    draft = nebius_like(tmp_path, target)
    report = preflight(str(draft), str(target))
    assert report.ok, [c for c in report.checks if c.status == "fail"]
    said = next(c for c in report.checks if c.name == "training reading")
    assert said.status == "warn" and "EAGLE" in said.message and "head_dim" in said.message
    assert report.engines["vllm"].loads and report.engines["llamacpp"].loads
    assert not report.engines["eagle"].loads
    db = f"sqlite:///{tmp_path}/r.db"
    for engine in ("vllm", "llamacpp"):
        outcome = run_replay(
            ReplayRequest(str(target), str(draft), prompt_ids=(1, 2, 3), num_steps=2, max_new_tokens=6,
                          engine=engine, record=False),
            db,
        )  # fmt: skip
        assert len(outcome.output_ids) == 6
    with pytest.raises(BadInput, match="head_dim"):
        run_replay(
            ReplayRequest(str(target), str(draft), prompt_ids=(1, 2, 3), num_steps=2, max_new_tokens=6,
                          record=False),
            db,
        )  # fmt: skip
