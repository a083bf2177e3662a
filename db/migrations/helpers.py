"""Tolerant operations for the revisions that also adopt databases made before Alembic: each
creates only what is missing, so running them on any older SpecLens database is safe."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


def _inspector() -> sa.Inspector:
    return sa.inspect(op.get_bind())


def has_table(name: str) -> bool:
    return name in _inspector().get_table_names()


def ensure_table(
    name: str, *columns: sa.Column, indexes: tuple[tuple[str, list[str], bool], ...] = ()
) -> None:
    """Create the table when it is missing; else add its missing nullable columns (a NOT NULL
    column cannot be added to rows that exist). Then its missing indexes: (name, columns, unique)."""
    if not has_table(name):
        op.create_table(name, *columns)
    else:
        for column in columns:
            if column.nullable and not column.primary_key:
                add_column_if_missing(name, column)
    for index_name, index_columns, unique in indexes:
        ensure_index(name, index_name, index_columns, unique)


def add_column_if_missing(table: str, column: sa.Column) -> None:
    if column.name not in {c["name"] for c in _inspector().get_columns(table)}:
        op.add_column(table, column)


def ensure_index(table: str, name: str, columns: list[str], unique: bool = False) -> None:
    if name not in {i["name"] for i in _inspector().get_indexes(table)}:
        op.create_index(name, table, columns, unique=unique)


def compare_type(context, inspected_column, metadata_column, inspected_type, metadata_type) -> bool | None:
    """Alembic's type comparison, except that on SQLite a VARCHAR(n) column equals a Text one
    (SQLite never enforces the length: revision 0003 leaves its tables as they are)."""
    if (
        context.dialect.name == "sqlite"
        and isinstance(inspected_type, sa.String)
        and isinstance(metadata_type, sa.Text)
    ):
        return False
    return None
