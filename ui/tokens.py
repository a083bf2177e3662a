"""Token pieces for display, from the target's tokenizer.json (the `tokenizers` library; no torch)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=8)
def _tokenizer(target_path: str):
    from tokenizers import Tokenizer

    path = Path(target_path) / "tokenizer.json"
    return Tokenizer.from_file(str(path)) if path.is_file() else None


class Pieces:
    """Maps token ids to display strings; ids without a tokenizer show as ⟨id⟩."""

    def __init__(self, target_path: str | None):
        self.tokenizer = _tokenizer(target_path) if target_path else None
        self.cache: dict[int, str] = {}

    def __call__(self, token: int) -> str:
        piece = self.cache.get(token)
        if piece is None:
            piece = (
                self.tokenizer.decode([token], skip_special_tokens=False) if self.tokenizer else f"⟨{token}⟩"
            )
            self.cache[token] = piece
        return piece

    def many(self, ids: list[int]) -> list[str]:
        return [self(t) for t in ids]

    def text(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return " ".join(f"⟨{t}⟩" for t in ids)
        return self.tokenizer.decode(ids, skip_special_tokens=False)
