"""What servers reported (observations) and the checkpoints a person picked before (remembered)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import Checkpoint, ServingObservationRow, utc_now

# ------------------------------------------------------------------------ serving observations


def add_observation(session: Session, observation: dict, draft_path: str | None, lint: list) -> int:
    row = ServingObservationRow(
        engine=observation["engine"],
        version=observation.get("version"),
        source=observation["source"],
        draft_path=draft_path,
        accept_length=observation.get("accept_length"),
        observation=observation,
        lint=lint,
    )
    session.add(row)
    session.flush()
    return row.id


def list_observations(session: Session, limit: int = 100) -> list[dict]:
    rows = session.scalars(
        select(ServingObservationRow).order_by(ServingObservationRow.id.desc()).limit(limit)
    )
    return [
        {
            "id": r.id,
            "created_at": r.created_at,
            "draft_path": r.draft_path,
            "lint": list(r.lint or []),
            **dict(r.observation or {}),
        }
        for r in rows
    ]


# --------------------------------------------------------------------------- remembered checkpoints


def remember_checkpoint(session: Session, role: str, path: str, name: str) -> None:
    """A target or draft directory the user added (the dashboard's sidebar), kept across reloads.
    Adding a path again renames it; nothing is duplicated."""
    row = session.scalars(select(Checkpoint).where(Checkpoint.role == role, Checkpoint.path == path)).first()
    if row is None:
        session.add(Checkpoint(role=role, path=path, config={"name": name}))
    else:
        row.config = {**(row.config or {}), "name": name}
        row.created_at = utc_now()  # the latest added is the one a reload selects


def remembered_checkpoints(session: Session, role: str) -> list[tuple[str, str]]:
    """(name, path) of the directories added for `role`, oldest first."""
    rows = session.scalars(
        select(Checkpoint).where(Checkpoint.role == role).order_by(Checkpoint.created_at, Checkpoint.id)
    )
    return [((r.config or {}).get("name") or Path(r.path).name or r.path, r.path) for r in rows]
