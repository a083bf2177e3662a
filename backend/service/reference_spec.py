"""A hidden-state reference of a stored run as asked (ReferenceSpec: what the fed features are compared
with) and as computed (ReferenceResult: the rows stored under its label). backend/service/references.py
computes it; torch-free, as the pages build the one and read the other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backend import BadInput
from backend.plain import Plain


@dataclass(frozen=True)
class ReferenceSpec(Plain):
    """`kind` and what it needs: another wiring (`aux_hf_indices`), training features (`path`, a .ckpt),
    a second run (`run_id`) or the target's own hidden (nothing); `why` it was suggested, when it was."""

    kind: str
    aux_hf_indices: list[int] | None = None
    path: str | None = None
    run_id: int | None = None
    why: str | None = None

    @property
    def label(self) -> str:
        """The name its rows are stored under (token_stats.reference) and the step viewer lists."""
        if self.kind == "wiring":
            why = f" ({self.why})" if self.why else ""
            return f"wiring HF {list(self.aux_hf_indices or [])}{why}"
        if self.kind == "features":
            return f"features {Path(self.path or '').name}"
        if self.kind == "run":
            return f"run {self.run_id}"
        if self.kind == "target_hidden":
            return "target hidden (draft out)"
        raise BadInput(f"unknown reference kind {self.kind!r}")


@dataclass(frozen=True)
class ReferenceResult(Plain):
    """A computed reference: `rows` rows over `positions` positions stored for the run under the label
    `reference`; `warning` when only part of the run could be compared."""

    run_id: int
    reference: str
    rows: int
    positions: int
    warning: str | None = None
