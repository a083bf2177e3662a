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


def default_reference(
    target_path: str, draft_path: str, fed: list[int] | None = None, db_url: str | None = None
) -> ReferenceSpec:
    """The hidden-state reference a new Decode run opens on: one that tells a healthy draft from a broken
    one. The fed features against, in order: the wiring the probe found this draft
    trained on, when it rejected the declared one; a wiring a serving engine would feed instead (its
    reading of the config); the target's own hidden vs the draft's output, when every engine feeds the
    declared wiring. `fed`: the wiring the run feeds (default: the declared one); `db_url`: where a
    probe of an earlier server is kept."""
    from backend.service.engine_readings import engine_readings
    from backend.service.kept_results import trained_wirings

    found = trained_wirings(target_path, draft_path, db_url)
    if found and list(found[0]) != list(fed or []):
        tied = f", tied with {len(found) - 1} it cannot tell apart" if len(found) > 1 else ""
        return ReferenceSpec("wiring", list(found[0]), why=f"the wiring probe's best{tied}")
    try:
        readings = engine_readings(draft_path, target_path)
    except Exception:  # noqa: BLE001 - an unreadable pair has no reading to compare; the replay says why
        return ReferenceSpec("target_hidden", why="the draft's output against the target's hidden")
    training = readings.engines.get(readings.training_engine)
    declared = fed or (training.aux_hf_indices if training else None)
    for engine, view in readings.engines.items():
        if view.loads and declared and list(view.aux_hf_indices) != list(declared):
            return ReferenceSpec("wiring", list(view.aux_hf_indices), why=f"what {engine} feeds")
    return ReferenceSpec("target_hidden", why="every engine feeds the declared wiring")
