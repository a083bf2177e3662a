"""Schema version 5: the `verdicts` table (a finished `diagnose` verdict per draft and target), so that a
verdict that took minutes outlives a page reload and the server that reached it.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from db.migrations.helpers import ensure_table

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    ensure_table(
        "verdicts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("target_path", sa.Text, nullable=False),
        sa.Column("draft_path", sa.Text, nullable=False),
        sa.Column("draft_stamp", sa.JSON, nullable=False),
        sa.Column("result", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("verdicts")
