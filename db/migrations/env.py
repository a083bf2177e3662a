"""Alembic's entry point. db/schema.py passes the connection it holds the schema lock on
(config.attributes["connection"]); the command line opens `-x url=...` (default SPECLENS_DB_URL,
then data/speclens.db)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from db.migrations.helpers import compare_type
from db.models import Base
from db.schema import SchemaVersion, engine_url  # noqa: F401 - SchemaVersion registers speclens_schema
from db.store import database_url


def run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by rebuilding them
        compare_type=compare_type,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("SpecLens migrations inspect the database; run them online (without --sql)")
connection = context.config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    engine = create_engine(engine_url(database_url(context.get_x_argument(as_dictionary=True).get("url"))))
    with engine.begin() as connection:
        run(connection)
    engine.dispose()
