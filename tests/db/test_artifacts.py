"""A run's tensors in one safetensors file, verified against the sha256 its row keeps."""

from __future__ import annotations

import pytest


def test_artifact_round_trip_and_checksum(tmp_path):
    import torch

    from db.artifacts import read_artifact, sha256_of, write_artifact

    tensors = {"a": torch.arange(6).reshape(2, 3), "b": torch.ones(4)[::2]}  # non-contiguous is fine
    path, sha = write_artifact(tmp_path / "7", "hidden_states", tensors)
    assert path == str(tmp_path / "7" / "hidden_states.safetensors") and not list(
        (tmp_path / "7").glob("*.partial")
    )
    loaded = read_artifact(path, sha)
    assert torch.equal(loaded["a"], tensors["a"]) and torch.equal(loaded["b"], tensors["b"])
    assert sha == sha256_of(tmp_path / "7" / "hidden_states.safetensors")


def test_artifact_checksum_is_verified(stored_run):
    from db import store
    from db.artifacts import read_artifact

    url, run_id = stored_run
    with store.session_scope(store.session_factory(store.make_engine(url))) as session:
        run = store.get_run(session, run_id)
    assert read_artifact(run.artifact_path, run.artifact_sha256)["draft_hidden"].shape[0] == run.step_count
    with open(run.artifact_path, "ab") as handle:
        handle.write(b"tampered")
    with pytest.raises(ValueError, match="sha256"):
        read_artifact(run.artifact_path, run.artifact_sha256)
