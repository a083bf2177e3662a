"""Schema version 3: text that comes from users or their files has no length limit: a dataset's
name, a sample's source, a token-stat reference label, a serving engine's version string.

PostgreSQL enforces VARCHAR(n) (a 300-character `source` in a JSONL file failed the whole import
there, not on SQLite), so these columns become TEXT (no table rewrite in PostgreSQL). SQLite never
enforces a VARCHAR length (the column has TEXT affinity), so its tables are left as they are
rather than rebuilt.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

COLUMNS = (
    ("datasets", "name", False),
    ("samples", "source", False),
    ("token_stats", "reference", True),
    ("serving_observations", "version", True),
)
LENGTHS = {"name": 200, "source": 200, "reference": 200, "version": 40}


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    for table, column, nullable in COLUMNS:
        op.alter_column(
            table,
            column,
            type_=sa.Text(),
            existing_type=sa.String(LENGTHS[column]),
            existing_nullable=nullable,
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    for table, column, nullable in COLUMNS:
        op.alter_column(
            table,
            column,
            type_=sa.String(LENGTHS[column]),
            existing_type=sa.Text(),
            existing_nullable=nullable,
            postgresql_using=f"left({column}, {LENGTHS[column]})",
        )
