"""Dataset imports on a real PostgreSQL server (tests/support/postgres.py): test_datasets.py's tests
that take `db_url`, run again with `db_url` naming a fresh PostgreSQL database (the good records of
a file in one transaction, a file without one stores nothing, the demo's eval set registered once),
and an upload kept beside the artifact folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.service import test_datasets as sqlite_datasets

pytestmark = pytest.mark.slow  # starts the session's PostgreSQL server

vocab_target = sqlite_datasets.vocab_target


@pytest.fixture()
def db_url(postgres_url) -> str:
    """Overrides tests/conftest.py's SQLite `db_url` for this module."""
    return postgres_url


test_jsonl_import_stores_the_good_records = sqlite_datasets.test_jsonl_import_stores_the_good_records
test_file_without_good_records_stores_nothing = sqlite_datasets.test_file_without_good_records_stores_nothing
test_named_import_with_an_explicit_format = sqlite_datasets.test_named_import_with_an_explicit_format
test_each_bundled_pairs_eval_sets_are_registered_once_on_a_fresh_database = (
    sqlite_datasets.test_each_bundled_pairs_eval_sets_are_registered_once_on_a_fresh_database
)


def test_an_upload_is_kept_and_deleted_with_its_dataset_on_postgresql(tmp_path, db_url, vocab_target):
    from backend.service.database import open_database
    from backend.service.datasets import delete_dataset, get_samples, import_upload, list_datasets
    from tests.support.datasets import mixed_jsonl

    data = mixed_jsonl(tmp_path / "mixed.jsonl").read_bytes()
    dataset_id, result = import_upload(db_url, "mixed.jsonl", data, None, vocab_target)
    assert result.imported == 2 and len(get_samples(db_url, dataset_id)) == 2
    uploads = (open_database(db_url).artifact_dir.parent / "uploads").resolve()
    assert uploads == (tmp_path / "uploads").resolve()  # beside SPECLENS_ARTIFACT_DIR, not in the repo
    (dataset,) = list_datasets(db_url)
    saved = Path(dataset.path)
    assert saved.parent.parent == uploads and saved.read_bytes() == data
    assert delete_dataset(db_url, dataset_id) and list_datasets(db_url) == [] and not saved.parent.exists()
