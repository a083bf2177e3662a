"""Helpers for tests that write draft checkpoints next to small targets and read preflight reports.

Heavy modules (torch, transformers, backend.engine) are imported inside the functions, so test
modules can import this one at collection time for free.
"""

from __future__ import annotations

from pathlib import Path


def target_config(target_dir: Path):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(target_dir, local_files_only=True)


def write_draft(
    path: Path,
    target_dir: Path,
    layout="specforge",
    draft_vocab=40,
    edit_config=None,
    edit_tensors=None,
    dtype=None,
) -> Path:
    """A random draft for the target in `target_dir`; `edit_config` / `edit_tensors` tamper with it."""
    from tests.support.synthetic import draft_config_dict, random_draft_tensors, save_draft

    config = draft_config_dict(target_config(target_dir), draft_vocab=draft_vocab, layout=layout)
    if edit_config:
        edit_config(config)
    tensors = random_draft_tensors(config)
    if edit_tensors:
        edit_tensors(tensors)
    return save_draft(path, config, tensors, layout, dtype=dtype)


def statuses(report) -> dict[str, list[str]]:
    """A preflight report's checks as {status: ["name: message", ...]}."""
    found: dict[str, list[str]] = {}
    for check in report.checks:
        found.setdefault(check.status, []).append(f"{check.name}: {check.message}")
    return found


def failures(report) -> str:
    return " | ".join(statuses(report).get("fail", []))
