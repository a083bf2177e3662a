"""A bundled pair's story for the Home page: which draft is broken, what is wrong with it, and how the
engines read the healthy one, read from the pair's own files (the lab note of the wiring the broken
draft was trained on, each draft's config as the engines read it, the build's training curve), so the
story cannot drift from the files. Told for whichever bundled pair (backend.defaults.PAIRS) is active."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from backend.defaults import REPO, BundledPair, pair_of
from backend.drafts.reading_fixes import describe_layers

LAB_NOTE = "TRAINED_WIRING.json"
CURVE = "TRAINING_CURVE.json"


@dataclass(frozen=True)
class Misreading:
    """An engine that feeds the final draft other layers than it was trained on (Home says which)."""

    engine: str
    aux_hf_indices: tuple[int, ...]
    source: str


@dataclass(frozen=True)
class TrainingCurve:
    """One draft's line of the build's training curve: held-out accept length per epoch, and the epoch
    kept."""

    chosen_epoch: int | None
    per_epoch: list[float]


@dataclass(frozen=True)
class DemoStory:
    pair: str  # BundledPair.key: "toy" or "smollm2"
    target: str
    drafts: tuple[str, ...]  # the pair's drafts present (final, epoch1, miswired)
    broken: str
    trained_aux_hf_indices: tuple[int, ...]  # what the build fed the broken draft (its lab note)
    declared_aux_hf_indices: tuple[int, ...]  # what its config.json makes the training engine feed it
    declared_source: str
    # How each engine reads the healthy draft's config where one reads it differently from its training
    # engine (vLLM's V1 runner reads nested ids as HF indices, docs/reference.md §2).
    final_trained_aux_hf_indices: tuple[int, ...] = ()
    final_misreadings: tuple[Misreading, ...] = ()
    curve: dict[str, TrainingCurve] = field(default_factory=dict)  # draft -> its curve; the build's file
    curve_definition: str = ""

    @property
    def final_curve(self) -> TrainingCurve | None:
        """The healthy draft's training curve (None: the build wrote none)."""
        return self.curve.get("final")

    @property
    def trained_words(self) -> str:
        return describe_layers(self.trained_aux_hf_indices)

    @property
    def declared_words(self) -> str:
        return describe_layers(self.declared_aux_hf_indices)


def _curve(pair: BundledPair) -> tuple[dict[str, TrainingCurve], str]:
    path = pair.drafts / CURVE
    try:
        data = json.loads(path.read_text())
        runs = {
            name: TrainingCurve(run["chosen_epoch"], [c["heldout_accept_length"] for c in run["curve"]])
            for name, run in data["runs"].items()
        }
        return runs, data.get("definition", "")
    except (OSError, ValueError, KeyError, TypeError):
        return {}, ""


def demo_story(target_path: str) -> DemoStory | None:
    """The story when the active target is a bundled one and its broken draft is on disk (None
    otherwise: a user's own pair has no story to tell). Read inline, without torch: each draft's
    engine table comes from its config and safetensors header (engine_readings.engine_readings, kept until a
    file it read changes)."""
    from backend.service.engine_readings import engine_readings

    pair = pair_of(target_path)
    if pair is None:
        return None
    broken = pair.drafts / pair.broken
    present = tuple(pair.draft_dirs())
    if not (broken / LAB_NOTE).is_file() or pair.broken not in present:
        return None
    note = json.loads((broken / LAB_NOTE).read_text())
    report = engine_readings(str(broken), str(pair.target))
    trained_final: tuple[int, ...] = ()
    misread: list[Misreading] = []
    if "final" in present:
        final = engine_readings(str(pair.drafts / "final"), str(pair.target))
        trained_final = tuple(final.aux_hf_indices)
        for name, reading in final.engines.items():
            if reading.loads and tuple(reading.aux_hf_indices) != trained_final:
                misread.append(Misreading(name, tuple(reading.aux_hf_indices), reading.wiring_source))
    curve, definition = _curve(pair)
    return DemoStory(
        pair=pair.key,
        target=str(pair.target.relative_to(REPO)),
        drafts=present,
        broken=pair.broken,
        trained_aux_hf_indices=tuple(note["aux_hf_indices"]),
        declared_aux_hf_indices=tuple(report.aux_hf_indices),
        declared_source=report.wiring_source,
        final_trained_aux_hf_indices=trained_final,
        final_misreadings=tuple(misread),
        curve=curve,
        curve_definition=definition,
    )
