"""The engine table read without torch (config + safetensors header) is preflight's own table: the
Home story and Decode's header show what preflight would, without loading a tensor."""

from __future__ import annotations

import pytest

from tests.support.lint import make_draft, make_lint_target

KEYS = ("engines", "disagreements", "training_engine", "aux_hf_indices", "wiring_source")


def preflight_table(draft, target):
    """Preflight's JSON read back typed (it round-trips), then its table: what the dashboard reads."""
    from backend.drafts.engine_table import EngineReadings, PreflightResult
    from backend.engine.preflight import preflight

    report = preflight(draft, target).result().to_dict()
    assert PreflightResult.from_dict(report).to_dict() == report
    return EngineReadings.from_dict({key: report[key] for key in KEYS})


@pytest.mark.parametrize("name", ["final", "epoch1", "miswired"])
def test_the_bundled_drafts(name):
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.drafts.engine_table import read_engine_table

    draft = DEMO_DRAFTS / name
    assert read_engine_table(draft, DEMO_TARGET) == preflight_table(draft, DEMO_TARGET)


@pytest.mark.parametrize(
    "layout, overrides",
    [
        ("specforge", {"aux_ids": [1, 15, 28]}),
        ("speculators", {"aux_ids": [2, 16, 29]}),
        ("specforge", {"aux_ids": [1, 15, 28], "eagle_aux_hidden_state_layer_ids": [2, 16, 29]}),
        ("specforge", {}),  # no ids at all: each engine's default
    ],
)
def test_every_layout_reads_the_same(tmp_path, layout, overrides):
    from backend.drafts.engine_table import read_engine_table

    target = make_lint_target(tmp_path / "target")
    draft = make_draft(tmp_path, "draft", layout=layout, **overrides)
    assert read_engine_table(draft, target) == preflight_table(draft, target)


def test_a_pickled_draft_is_left_to_preflight(tmp_path):
    import shutil

    from backend import BadInput
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.drafts.engine_table import read_engine_table

    draft = tmp_path / "bin"
    draft.mkdir()
    shutil.copy(DEMO_DRAFTS / "final" / "config.json", draft)
    with pytest.raises(BadInput, match="no weights"):
        read_engine_table(draft, DEMO_TARGET)
    (draft / "pytorch_model.bin").write_bytes(b"")
    assert read_engine_table(draft, DEMO_TARGET) is None
