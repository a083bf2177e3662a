"""Target and draft directories the user added in the dashboard, kept in the database beside the
datasets so that a reload (or a colleague on the same PostgreSQL store) finds them again."""

from __future__ import annotations

from pathlib import Path

from backend import BadInput
from backend.service.database import open_database
from db import store

ROLES = ("target", "draft")


def remember(db_url: str | None, role: str, path: str) -> str:
    """Store a directory that has a config.json; returns the name it is listed under. BadInput when
    the directory or its config.json is missing (said apart, so the user knows which)."""
    if role not in ROLES:
        raise BadInput(f"unknown checkpoint role {role!r}; use one of {', '.join(ROLES)}")
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise BadInput(f"{path}: no such directory")
    if not (directory / "config.json").is_file():
        raise BadInput(f"{path}: the directory has no config.json (not a model or draft checkpoint)")
    name = directory.name or str(directory)
    with store.session_scope(open_database(db_url).factory) as session:
        store.remember_checkpoint(session, role, str(directory), name)
    return name


def remembered(db_url: str | None, role: str) -> list[tuple[str, str]]:
    """(name, path) of the directories added for `role`, the latest added last. Two drafts may share a
    name (two runs' `final`): the pages tell them apart by their parent folder."""
    with store.session_scope(open_database(db_url).factory) as session:
        return store.remembered_checkpoints(session, role)
