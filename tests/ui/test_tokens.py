"""Token pieces for display, from a target's tokenizer.json (no torch)."""

from __future__ import annotations

from backend.defaults import DEMO_TARGET
from ui.tokens import Pieces


def test_pieces_without_a_tokenizer_show_ids(tmp_path):
    pieces = Pieces(str(tmp_path))
    assert pieces(7) == "⟨7⟩" and pieces.many([1, 2]) == ["⟨1⟩", "⟨2⟩"] and pieces.text([1, 2]) == "⟨1⟩ ⟨2⟩"
    assert Pieces(None)(3) == "⟨3⟩"


def test_pieces_of_the_demo_tokenizer():
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(DEMO_TARGET / "tokenizer.json"))
    ids = tokenizer.encode("def main():").ids
    pieces = Pieces(str(DEMO_TARGET))
    assert pieces.text(ids) == tokenizer.decode(ids, skip_special_tokens=False)
    assert "".join(pieces.many(ids)) == pieces.text(ids)
