"""Schema version 2: the steps' `tree` column and the runs' writer heartbeat (`writer_host`,
`writer_pid`, `heartbeat_at`: a run whose writer is gone is interrupted, not running).

Tolerant: a database made by SpecLens before Alembic may already have them.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from db.migrations.helpers import add_column_if_missing

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_column_if_missing("steps", sa.Column("tree", sa.JSON, nullable=True))
    add_column_if_missing("runs", sa.Column("writer_host", sa.String(255), nullable=True))
    add_column_if_missing("runs", sa.Column("writer_pid", sa.Integer, nullable=True))
    add_column_if_missing("runs", sa.Column("heartbeat_at", sa.DateTime, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as runs:  # SQLite drops columns by rebuilding the table
        runs.drop_column("heartbeat_at")
        runs.drop_column("writer_pid")
        runs.drop_column("writer_host")
    with op.batch_alter_table("steps") as steps:
        steps.drop_column("tree")
