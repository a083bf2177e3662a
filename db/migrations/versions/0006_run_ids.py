"""Schema version 6: the `run_ids` table, whose AUTOINCREMENT hands out run ids on SQLite, so that a
deleted run's id is never given to the next run (SQLite's plain INTEGER PRIMARY KEY reuses the largest
id once it is deleted). Seeded past every id this database may have given: its largest run, and on
SQLite each numbered artifact folder beside the file (runs deleted before this revision left theirs
behind).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op

from db.migrations.helpers import has_table

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    if not has_table("run_ids"):
        op.create_table("run_ids", sa.Column("id", sa.Integer, primary_key=True), sqlite_autoincrement=True)
    if bind.dialect.name != "sqlite":
        return  # PostgreSQL's runs.id sequence never goes back: the table stays empty there
    largest = bind.scalar(sa.text("SELECT max(id) FROM runs")) or 0
    given = max([largest, *_artifact_ids(bind.engine.url.database)])
    if given:
        bind.execute(sa.text("INSERT INTO run_ids (id) VALUES (:id)"), {"id": given})
        bind.execute(sa.text("DELETE FROM run_ids"))  # sqlite_sequence keeps it


def _artifact_ids(database: str | None) -> list[int]:
    """The run ids named by artifact folders beside a SQLite file (db/connection.py artifact_root)."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return []
    folder = Path(database).parent / "artifacts"
    try:
        return [int(entry.name) for entry in folder.iterdir() if entry.name.isdigit() and entry.is_dir()]
    except OSError:
        return []


def downgrade() -> None:
    op.drop_table("run_ids")
