"""The bundled demo's story for the Home page: which draft is broken, what is wrong with it, read
from the demo's own files (the lab note of the wiring it was trained on, and the wiring its config
declares as the training engine reads it), so the story cannot drift from the files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
from backend.engine.readings import describe_layers

BROKEN = "miswired"  # the draft of docs/seed-story.md's bug class
LAB_NOTE = "TRAINED_WIRING.json"


@dataclass(frozen=True)
class DemoStory:
    drafts: tuple[str, ...]  # the bundled drafts present (final, epoch1, miswired)
    broken: str
    trained_aux_hf_indices: tuple[int, ...]  # what the build fed it (its lab note)
    declared_aux_hf_indices: tuple[int, ...]  # what its config.json makes every engine feed it
    declared_source: str

    @property
    def trained_words(self) -> str:
        return describe_layers(self.trained_aux_hf_indices)

    @property
    def declared_words(self) -> str:
        return describe_layers(self.declared_aux_hf_indices)


def demo_story(target_path: str) -> DemoStory | None:
    """The story when the active target is the bundled one and its broken draft is on disk (None
    otherwise: a user's own pair has no story to tell)."""
    from backend.engine.preflight import preflight

    broken = DEMO_DRAFTS / BROKEN
    if Path(target_path).resolve() != DEMO_TARGET.resolve() or not (broken / LAB_NOTE).is_file():
        return None
    note = json.loads((broken / LAB_NOTE).read_text())
    report = preflight(str(broken), str(DEMO_TARGET)).to_dict()
    present = tuple(p.name for p in sorted(DEMO_DRAFTS.iterdir()) if (p / "config.json").is_file())
    return DemoStory(
        drafts=present,
        broken=BROKEN,
        trained_aux_hf_indices=tuple(note["aux_hf_indices"]),
        declared_aux_hf_indices=tuple(report["aux_hf_indices"]),
        declared_source=report.get("wiring_source", ""),
    )
