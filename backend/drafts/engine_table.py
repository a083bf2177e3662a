"""How every engine reads a draft on a target, from the draft's config.json, its weights' names and the
target's depth: preflight's engine table, and the one the dashboard reads without loading a tensor.

Torch-free: a safetensors draft's weight names come from the file headers, so the Streamlit server
computes the table inline (Home's story, Decode's header). A pytorch_model.bin draft has no header to
read: `read_engine_table` answers None and the caller reads it with preflight in the reader process.
Preflight's report as JSON (`PreflightResult`: its checks beside this table) is declared here too, so
the pages read a refused draft's report without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from backend import BadInput
from backend.drafts.dflash_config import is_dflash, parse_dflash_config
from backend.drafts.draft_config import DraftConfig, read_draft_config
from backend.drafts.json_config import config_sizes, read_json_object
from backend.drafts.layouts import to_internal_names
from backend.drafts.reading_fixes import disagreements, serving_wiring_findings
from backend.drafts.readings import (
    ENGINES,
    EngineReading,
    EngineView,
    dflash_view,
    fed_wiring,
    read_as,
    training_engine,
)
from backend.drafts.safetensors_header import tensor_shapes
from backend.plain import Plain
from backend.run.engine_names import SERVING_ENGINES
from backend.run.wiring import Wiring

OWN_EMBEDDING = "own_embedding.weight"


@dataclass(frozen=True)
class EngineTable:
    engines: dict[str, EngineView]  # engine name -> how it reads the draft (readings.ENGINES)
    training: str  # the engine the draft's config says it was trained for
    declared: EngineView  # the training engine's reading ("auto"): what feeds the draft by default
    disagreements: list

    def fixes(self, wiring: Wiring | None) -> list:
        """reading_fixes.serving_wiring_findings against the wiring the draft is fed."""
        return serving_wiring_findings(self.engines, list(wiring.aux_hf_indices)) if wiring else []


@dataclass(frozen=True)
class Disagreement(Plain):
    """Where two readings of the draft part ways (reading_fixes.disagreements): the two engines, the
    field (wiring, a DraftMath switch, loads) and the sentence."""

    engines: list[str]
    what: str
    message: str


@dataclass(frozen=True)
class EngineReadings(Plain):
    """The table as the dashboard shows it: each engine's reading, where they disagree, the engine the
    draft was most likely trained for, and the declared wiring it is fed by default."""

    engines: dict[str, EngineReading] = field(default_factory=dict)
    disagreements: list[Disagreement] = field(default_factory=list)
    training_engine: str | None = None
    aux_hf_indices: list[int] = field(default_factory=list)
    wiring_source: str | None = None


@dataclass(frozen=True)
class Check(Plain):
    """One preflight check: pass | warn | fail, and a sentence a user understands."""

    name: str
    status: str
    message: str


@dataclass(frozen=True)
class PreflightResult(Plain):
    """Preflight's report as JSON (`preflight --json`, a refused draft's task, the doctor): the checks,
    the wiring the draft is fed (override, else the training reading) and the engine table (the keys
    of EngineReadings), and each serving engine's wiring fix (reading_fixes.serving_wiring_findings)."""

    ok: bool
    checks: list[Check]
    aux_hf_indices: list[int] = field(default_factory=list)
    wiring_source: str | None = None
    training_engine: str | None = None
    engines: dict[str, EngineReading] = field(default_factory=dict)
    disagreements: list[Disagreement] = field(default_factory=list)
    serving_fixes: list[dict] = field(default_factory=list)


def engine_table(config: DraftConfig, num_layers: int, has_own_embedding: bool) -> EngineTable:
    engines = {name: read_as(name, config, num_layers, has_own_embedding) for name in ENGINES}
    training = training_engine(config)
    declared = read_as("auto", config, num_layers, has_own_embedding)
    return EngineTable(engines, training, declared, disagreements(engines, training))


def read_engine_table(draft_dir: str | Path, target_dir: str | Path) -> EngineReadings | None:
    """The table as the dashboard shows it, read from the files without torch; None for weights only
    torch reads (a pytorch_model.bin). BadInput names the file that cannot be read."""
    shapes = tensor_shapes(draft_dir)
    if shapes is None:
        if not any(
            Path(draft_dir, n).is_file() for n in ("pytorch_model.bin", "pytorch_model.bin.index.json")
        ):
            raise BadInput(f"draft {draft_dir}: no weights (model.safetensors or pytorch_model.bin)")
        return None
    file = Path(target_dir) / "config.json"
    if not file.is_file():
        raise BadInput(f"target {target_dir}: not a local Hugging Face model directory (no config.json)")
    layers = config_sizes(read_json_object(file), file, ("num_hidden_layers",))["num_hidden_layers"]
    if is_dflash(draft_dir):  # its own readings (dflash_readings.py): every engine reads the same layers
        return _dflash_readings(draft_dir, layers)
    table = engine_table(read_draft_config(draft_dir), layers, OWN_EMBEDDING in to_internal_names(shapes)[0])
    wiring = fed_wiring(table.declared, None, layers)
    return EngineReadings(
        engines={name: view.reading() for name, view in table.engines.items()},
        disagreements=[Disagreement.from_dict(d) for d in table.disagreements],
        training_engine=table.training,
        aux_hf_indices=list(wiring.aux_hf_indices),
        wiring_source=wiring.source,
    )


def _dflash_readings(draft_dir, layers: int) -> EngineReadings:
    where = Path(draft_dir) / "config.json"
    config = parse_dflash_config(read_json_object(where), str(where))
    views = {name: dflash_view(name, config, layers) for name in SERVING_ENGINES}
    wiring = views["sglang"].wiring
    return EngineReadings(
        engines={name: view.reading() for name, view in views.items()},
        disagreements=[],
        training_engine="specforge",
        aux_hf_indices=list(wiring.aux_hf_indices),
        wiring_source=wiring.source,
    )
