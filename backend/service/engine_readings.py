"""How each engine reads a draft on a target (preflight's table), read inline from the config and the
safetensors headers and kept until the files change; only a pytorch_model.bin draft is read in the
reader process."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from backend.drafts.engine_table import EngineReadings
from backend.service.kept_results import DRAFT_FILES


def engine_readings(draft_path: str, target_path: str) -> EngineReadings:
    """How each engine reads the draft on this target, and where they disagree (preflight's table),
    read inline from the config and the safetensors headers (backend/drafts/engine_table.py); only a
    pytorch_model.bin draft is read by preflight in the reader process. Kept until the draft's or the
    target's files change."""
    from backend.service.stamps import stamp

    files = [Path(draft_path, name) for name in DRAFT_FILES]
    return _engine_readings(
        str(draft_path), str(target_path), stamp(*files, Path(target_path, "config.json"))
    )


@lru_cache(maxsize=32)
def _engine_readings(draft_path: str, target_path: str, _stamp: tuple) -> EngineReadings:
    from backend.drafts.engine_table import read_engine_table
    from backend.service.readers import in_reader

    return read_engine_table(draft_path, target_path) or in_reader(
        read_engine_readings, draft_path, target_path
    )


def read_engine_readings(draft_path: str, target_path: str, progress=None) -> EngineReadings:
    """engine_readings' reading of a draft only torch reads (a reader job): preflight's table."""
    from backend.engine.preflight import preflight

    report = preflight(draft_path, target_path).result()
    return EngineReadings(
        report.engines,
        report.disagreements,
        report.training_engine,
        report.aux_hf_indices,
        report.wiring_source,
    )
