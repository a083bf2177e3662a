"""The README stays a short front page: its links resolve, every page of docs/ is reachable from it, and
the `speclens` command it names is the CLI's entry point."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_readme_is_short_and_links_every_docs_page():
    assert len(README.splitlines()) <= 150
    links = set(re.findall(r"\]\(([^)#]+)\)", README))
    assert all((ROOT / link).exists() for link in links), [
        link for link in links if not (ROOT / link).exists()
    ]
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert pages <= links, pages - links


def test_the_two_commands_are_there():
    assert "bash tests/run.sh" in README
    first = next(line for line in README.splitlines() if line.startswith("python3 -m venv .venv &&"))
    assert "streamlit run app.py" in first and "-e ." in first


def test_speclens_is_the_clis_entry_point():
    from backend.cli import main

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, function = scripts["speclens"].split(":")
    assert module == "backend.cli" and function == "main" and callable(main)
