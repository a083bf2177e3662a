"""SpecForge offline feature files (.ckpt), loaded with weights_only=True and checked."""

from __future__ import annotations

import pytest

from backend import BadInput


def save(path, **entries):
    import torch

    torch.save(entries, path)
    return path


def test_a_feature_file_and_its_shapes(tmp_path):
    import torch

    from backend.data.features import load_feature_file

    aux = torch.randn(1, 5, 12)
    path = save(
        tmp_path / "data_0.ckpt",
        input_ids=torch.arange(5),
        loss_mask=torch.tensor([0, 0, 1, 1, 1]),
        hidden_state=torch.randn(1, 5, 4),
        aux_hidden_state=aux,
    )
    features = load_feature_file(path, hidden_size=4)
    assert features.input_ids == [0, 1, 2, 3, 4] and features.loss_mask == [0, 0, 1, 1, 1]
    assert torch.equal(features.aux_hidden_state, aux[0]) and features.hidden_state.shape == (5, 4)
    no_mask = load_feature_file(
        save(tmp_path / "data_1.ckpt", input_ids=torch.arange(3), aux_hidden_state=torch.randn(3, 12))
    )
    assert no_mask.loss_mask == [1, 1, 1] and no_mask.hidden_state is None


def test_bad_feature_files_are_bad_input(tmp_path):
    import torch

    from backend.data.features import load_feature_file

    with pytest.raises(BadInput, match="no such feature file"):
        load_feature_file(tmp_path / "missing.ckpt")
    wide = save(tmp_path / "wide.ckpt", input_ids=torch.arange(3), aux_hidden_state=torch.randn(3, 12))
    with pytest.raises(BadInput, match="features of another target"):
        load_feature_file(wide, hidden_size=8)
    odd = save(tmp_path / "odd.ckpt", input_ids=torch.arange(3), aux_hidden_state=torch.randn(3, 10))
    with pytest.raises(BadInput, match="not 3 \\* hidden size"):
        load_feature_file(odd)
    short = save(tmp_path / "short.ckpt", input_ids=torch.arange(3), aux_hidden_state=torch.randn(2, 12))
    with pytest.raises(BadInput, match="does not match 3 input_ids"):
        load_feature_file(short)
