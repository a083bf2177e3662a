"""Datasets in the store: an import lands with its good samples in one transaction, a file with
no good record stores nothing, and the demo's eval set is registered on a fresh database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend import BadInput
from tests.support.datasets import VOCAB, mixed_jsonl, write_lines


@pytest.fixture(scope="module")
def vocab_target(tmp_path_factory):
    """A target directory with only config.json: vocab VOCAB, no tokenizer."""
    from transformers import LlamaConfig

    path = tmp_path_factory.mktemp("vocab-target")
    LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2
    ).save_pretrained(path)
    return str(path)


def test_jsonl_import_stores_the_good_records(tmp_path, db_url, vocab_target):
    from backend.service.datasets import get_samples, import_dataset, list_datasets, target_vocabulary

    assert target_vocabulary(vocab_target) == (None, VOCAB)
    assert target_vocabulary(None) == (None, None)
    with pytest.raises(BadInput, match="no config.json"):  # a named target must be readable
        target_vocabulary(str(tmp_path / "none"))
    dataset_id, result = import_dataset(
        db_url, mixed_jsonl(tmp_path / "mixed.jsonl"), target_path=vocab_target
    )
    assert result.imported == 2  # streamed: the stored samples carry their lines
    assert [s.line for s in get_samples(db_url, dataset_id)] == [1, 14]
    assert [r.line for r in result.rejected] == list(range(2, 14))
    assert (
        "outside the vocabulary" in {r.line: r.reason for r in result.rejected}[6]
    )  # the target's vocab bounds ids
    (dataset,) = list_datasets(db_url)
    assert (dataset.id, dataset.sample_count, dataset.format, dataset.name) == (
        dataset_id,
        2,
        "jsonl",
        "mixed.jsonl",
    )
    samples = get_samples(db_url, dataset_id)
    assert [s.source for s in samples] == ["a", "b"] and samples[0].prompt_ids == [1, 2]
    assert samples[0].loss_coverage == pytest.approx(4 / 6)
    assert [(s.dataset_id, s.index, s.line, s.seq_len) for s in samples] == [
        (dataset_id, 0, 1, 6),
        (dataset_id, 1, 14, 6),
    ]
    assert all(s.id is not None for s in samples)


def test_file_without_good_records_stores_nothing(tmp_path, db_url, vocab_target):
    from backend.service.datasets import import_dataset, list_datasets

    path = write_lines(tmp_path / "bad.jsonl", [b"{", b"[]"])
    with pytest.raises(BadInput, match="no valid record"):
        import_dataset(db_url, path, target_path=vocab_target)
    empty = write_lines(tmp_path / "empty.jsonl", [b""])
    with pytest.raises(BadInput, match="empty file"):
        import_dataset(db_url, empty)
    assert list_datasets(db_url) == []
    with pytest.raises(BadInput, match="no such file"):
        import_dataset(db_url, tmp_path / "missing.jsonl")


def test_named_import_with_an_explicit_format(tmp_path, db_url):
    from backend.service.datasets import import_dataset, list_datasets

    path = tmp_path / "records.txt"
    path.write_text(json.dumps({"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1]}) + "\n")
    dataset_id, result = import_dataset(db_url, path, name="mine", format="jsonl")
    assert (
        result.format == "jsonl" and [d.name for d in list_datasets(db_url)] == ["mine"] and dataset_id == 1
    )


def test_each_bundled_pairs_eval_sets_are_registered_once_on_a_fresh_database(db_url):
    from backend.defaults import BUNDLED_EVAL_SETS, DEMO_EVAL, SMOLLM2
    from backend.service.datasets import ensure_demo_dataset, get_samples, list_datasets

    dataset_id = ensure_demo_dataset(db_url)
    registered = list_datasets(db_url)
    assert [(d.name, d.path) for d in registered] == [
        (n, str(p)) for n, p in BUNDLED_EVAL_SETS if p.is_file()
    ]
    first = registered[0]
    assert first.id == dataset_id and first.name == "demo eval (bundled)" and first.path == str(DEMO_EVAL)
    assert str(SMOLLM2 / "data" / "eval_raw.jsonl") in [d.path for d in registered]  # committed with the pair
    for dataset in registered:
        assert len(get_samples(db_url, dataset.id)) == dataset.sample_count > 0
    assert ensure_demo_dataset(db_url) is None and len(list_datasets(db_url)) == len(registered)


def test_an_upload_is_kept_under_the_data_folder_as_the_datasets_path(tmp_path, vocab_target):
    from backend.service.database import open_database
    from backend.service.datasets import (
        delete_dataset,
        get_samples,
        import_dataset,
        import_upload,
        list_datasets,
        uploaded_as,
    )

    db_url = f"sqlite:///{tmp_path / 'up.db'}"
    data = mixed_jsonl(tmp_path / "mixed.jsonl").read_bytes()
    dataset_id, result = import_upload(db_url, "../../evil/mixed.jsonl", data, None, vocab_target)
    assert result.imported == 2 and len(get_samples(db_url, dataset_id)) == 2
    uploads = (open_database(db_url).artifact_dir.parent / "uploads").resolve()
    (dataset,) = list_datasets(db_url)
    saved = Path(dataset.path)  # the saved copy, not a temporary file removed after the import
    assert saved.is_absolute() and saved.parent.parent == uploads and saved.read_bytes() == data
    assert dataset.name == "mixed.jsonl" and uploaded_as(db_url, dataset.path) == "mixed.jsonl"
    assert not (tmp_path / "evil").exists()  # nothing outside uploads/
    again, same = import_dataset(db_url, tmp_path / "mixed.jsonl", target_path=vocab_target)  # nothing added
    assert again == dataset_id and same.already == dataset_id and same.imported == 0
    assert len(list_datasets(db_url)) == 1
    twice, same = import_upload(db_url, "mixed.jsonl", data, None, vocab_target)  # and no second copy kept
    assert twice == dataset_id and same.already == dataset_id and len(list(uploads.iterdir())) == 1
    other = write_lines(
        tmp_path / "other.jsonl", [json.dumps({"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]})]
    )
    by_path, _ = import_dataset(db_url, other)
    assert uploaded_as(db_url, str(other)) is None and uploaded_as(db_url, None) is None

    with pytest.raises(
        BadInput, match="no valid record"
    ) as refused:  # a refused upload leaves nothing behind
        import_upload(db_url, "bad.jsonl", b"{oops\n")
    assert str(refused.value).startswith("bad.jsonl: ")  # the user's name for it, not the server's copy
    assert [p.name for p in uploads.iterdir()] == [saved.parent.name]
    assert delete_dataset(db_url, dataset_id) and not saved.parent.exists() and not any(uploads.iterdir())
    assert delete_dataset(db_url, by_path) and other.is_file()  # never a user's file


def test_feature_tensors_lists_what_a_feature_file_holds(tmp_path):
    import torch

    from backend.defaults import DEMO_EVAL
    from backend.service.datasets import feature_tensors
    from tests.support.demo import feature_file_size

    path = DEMO_EVAL.parent / "features" / "data_0.ckpt"
    tokens, hidden = feature_file_size("data_0.ckpt")
    rows = {r["tensor"]: r for r in feature_tensors(str(path))}
    assert list(rows) == ["input_ids", "loss_mask", "hidden_state", "aux_hidden_state"]
    assert rows["input_ids"]["shape"] == f"[{tokens}]"
    assert (rows["hidden_state"]["shape"], rows["hidden_state"]["dtype"]) == (
        f"[1, {tokens}, {hidden}]",
        "bfloat16",
    )
    assert (
        rows["aux_hidden_state"]["shape"] == f"[1, {tokens}, {3 * hidden}]"
        and "3 target layers" in rows["aux_hidden_state"]["holds"]
    )
    legacy = tmp_path / "legacy.ckpt"  # not memory-mappable: read the ordinary way
    torch.save({"input_ids": torch.arange(3), "note": "x"}, legacy, _use_new_zipfile_serialization=False)
    assert feature_tensors(str(legacy)) == [
        {"tensor": "input_ids", "shape": "[3]", "dtype": "int64", "holds": "token ids"},
        {"tensor": "note", "shape": "", "dtype": "str", "holds": ""},
    ]
    for path, reason in [
        (tmp_path / "gone.ckpt", "no longer at"),
        (DEMO_EVAL, "not a torch.save file"),
        (None, "names no feature file"),
    ]:
        with pytest.raises(BadInput, match=reason) as refused:
            feature_tensors(path and str(path))
        assert "\n" not in str(refused.value)
    torch.save([torch.zeros(2)], tmp_path / "list.ckpt")
    with pytest.raises(BadInput, match="not a dict"):
        feature_tensors(str(tmp_path / "list.ckpt"))
