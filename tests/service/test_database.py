"""The database a request writes to: opened once per URL, artifacts beside a SQLite file."""

from __future__ import annotations

from backend.service.database import database_url, open_database


def test_one_database_per_url(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'a' / 'speclens.db'}"
    database = open_database(url)
    assert open_database(url) is database and database.url == url
    assert database.artifact_dir == tmp_path / "a" / "artifacts" and (tmp_path / "a" / "speclens.db").exists()
    assert open_database(f"sqlite:///{tmp_path / 'b.db'}") is not database
    monkeypatch.setenv("SPECLENS_DB_URL", url)
    assert database_url() == url and open_database() is database
    assert database_url("sqlite:///elsewhere.db") == "sqlite:///elsewhere.db"
