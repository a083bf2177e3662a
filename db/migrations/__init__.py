"""The schema's history as Alembic revisions, run by db/schema.py on every backend (SQLite, PostgreSQL).

`versions/` holds one file per schema version; the revision id is the version number (`0001`,
`0002`, ...) and db/schema.py's SCHEMA_VERSION / HEAD_REVISION name the newest. db/schema.py runs
them programmatically (no alembic.ini needed); `alembic.ini` here is for the Alembic command line:

    .venv/bin/alembic -c db/migrations/alembic.ini -x url=sqlite:///data/speclens.db current
    .venv/bin/alembic -c db/migrations/alembic.ini -x url=... revision --autogenerate -m "what changed"

(`-x url` defaults to SPECLENS_DB_URL, then data/speclens.db). A new revision gets the next number
as its id (`--rev-id 0003`), then bump SCHEMA_VERSION and HEAD_REVISION; tests/db/test_schema.py
checks that the migrated schema equals db/models.py on both backends.

Databases made before Alembic (schema versions 1 and 2, recorded only in `speclens_schema`) have no
`alembic_version` table; they are upgraded from the start, so revisions 0001 and 0002 are
tolerant: they create only the tables, columns and indexes that are missing (helpers.py).
"""
