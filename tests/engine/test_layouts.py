"""Tensor names of every draft layout, read and written (docs/reference.md §1)."""

from __future__ import annotations

import pytest

from backend.drafts.layouts import LAYOUTS, file_name, to_internal_names, to_layout_name, to_layout_names

OURS = {
    "fc.weight": 1,
    "layers.0.mlp.up_proj.weight": 2,
    "layers.1.mlp.up_proj.weight": 3,
    "own_embedding.weight": 4,
    "d2t": 5,
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_written_names_read_back_as_ours(layout):
    written = to_layout_names(OURS, layout)
    renamed, _, original = to_internal_names(written)
    assert renamed == OURS
    assert all(written[original[name]] == value for name, value in OURS.items())


def test_each_layout_spells_the_first_layer_and_the_embedding():
    assert to_layout_name("layers.0.mlp.up_proj.weight", "specforge") == "midlayer.mlp.up_proj.weight"
    assert to_layout_name("layers.0.mlp.up_proj.weight", "eagle") == "midlayer.mlp.up_proj.weight"
    assert to_layout_name("layers.0.mlp.up_proj.weight", "speculators") == "layers.0.mlp.up_proj.weight"
    assert to_layout_name("own_embedding.weight", "speculators") == "embed_tokens.weight"
    with pytest.raises(ValueError, match="unknown layout"):
        to_layout_name("fc.weight", "medusa")


def test_prefixes_and_multi_layer_names_are_normalised_with_notes():
    renamed, notes, original = to_internal_names({"model.midlayers.1.norm.weight": 1, "model.fc.weight": 2})
    assert renamed == {"layers.1.norm.weight": 1, "fc.weight": 2}
    assert "stripped a 'model.' prefix" in notes and any("midlayers" in n for n in notes)
    assert original["layers.1.norm.weight"] == "model.midlayers.1.norm.weight"


def test_messages_name_tensors_as_the_file_does():
    specforge = {"layers.0.norm.weight": "midlayer.norm.weight"}
    assert file_name("layers.0.mlp.up_proj.weight", specforge) == "midlayer.mlp.up_proj.weight"
    assert (
        file_name("layers.0.mlp.up_proj.weight", {"fc.weight": "fc.weight"}) == "layers.0.mlp.up_proj.weight"
    )
    assert file_name("layers.0.norm.weight", specforge) == "midlayer.norm.weight"
