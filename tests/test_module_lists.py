"""The module lists in docs/layout.md and backend/__init__.py's docstring name every
module under backend/ (issue 32: they had fallen 9 and 13 modules behind)."""

from __future__ import annotations

import re
from pathlib import Path

import backend

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("run", "drafts", "target", "engine", "data", "diagnostics", "service")


def _modules() -> dict[str, set[str]]:
    return {
        package: {p.stem for p in (ROOT / "backend" / package).glob("*.py") if p.stem != "__init__"}
        for package in PACKAGES
    }


def _listed(text: str, heading: str) -> set[str]:
    """The names on the indented lines under `heading`, up to the next unindented-enough line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(heading))
    indent = len(lines[start]) - len(lines[start].lstrip())
    names = set()
    for line in lines[start + 1 :]:
        if len(line) - len(line.lstrip()) <= indent:
            break
        names.add(re.sub(r"\.py$", "", line.split()[0]))
    return names


def test_the_docs_layout_lists_every_backend_module():
    layout = (ROOT / "docs" / "layout.md").read_text()
    for package, modules in _modules().items():
        assert _listed(layout, f"backend/{package}/") == modules, package


def test_the_package_docstring_lists_every_backend_module():
    for package, modules in _modules().items():
        assert _listed(backend.__doc__, f"backend.{package} ") == modules, package
