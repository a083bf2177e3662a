"""Quick checks the pages run inline (no model is loaded): the serving-flag lint."""

from __future__ import annotations


def lint(draft_path: str, command: str, engine: str, target_path: str | None) -> dict:
    """Findings for an SGLang launch command (engine 'SGLang') or vLLM arguments ('vLLM')."""
    from backend.diagnostics.lint import lint_command

    sglang, vllm = (command, None) if engine.lower() == "sglang" else (None, command)
    return lint_command(draft_path, sglang, vllm, target_path).to_dict()


def engine_readings(draft_path: str, target_path: str) -> dict:
    """How each engine reads the draft on this target, and where they disagree (preflight's table)."""
    from backend.engine.preflight import preflight

    report = preflight(draft_path, target_path).to_dict()
    return {key: report[key] for key in ("ok", "engines", "disagreements", "training_engine")}
