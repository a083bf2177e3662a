"""Schema version 4: the `wiring_probes` table (a finished wiring probe per draft and target), so that
what a probe found outlives the server that ran it: the Decode page's default reference, the lint and
the verdict read it.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from db.migrations.helpers import ensure_table

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    ensure_table(
        "wiring_probes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("target_path", sa.Text, nullable=False),
        sa.Column("draft_path", sa.Text, nullable=False),
        sa.Column("draft_stamp", sa.JSON, nullable=False),
        sa.Column("report", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("wiring_probes")
