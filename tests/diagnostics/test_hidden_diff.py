"""Hidden-state comparisons: per token and chunk metrics, and train-vs-serve on a feature file
written from the wiring the bigram drafts were trained on."""

from __future__ import annotations

import pytest

from tests.support.models import TRAINED


def test_compare_chunks_metrics():
    import torch

    from backend.diagnostics.hidden_diff import compare_chunks
    from backend.diagnostics.mismatch import first_mismatch

    fed = torch.tensor([[1.0, 0.0, 2.0, 0.0, 0.0, 3.0]])
    reference = torch.tensor([[1.0, 0.0, 1.0, 0.0, 0.0, -3.0]])
    rows = compare_chunks(fed, reference, [7], ["a", "b", "c"], "ref")
    a, b, c = rows
    assert a["cosine"] == pytest.approx(1) and a["relative_error"] == 0 and a["norm_ratio"] == 1
    assert b["cosine"] == pytest.approx(1) and b["norm_ratio"] == pytest.approx(2) and b["max_abs_diff"] == 1
    assert c["cosine"] == pytest.approx(-1) and c["relative_error"] == pytest.approx(2)
    assert first_mismatch(rows, ["a", "b", "c"])["chunk"] == "b"  # same cosine, twice the norm
    assert {r["position"] for r in rows} == {7} and {r["reference"] for r in rows} == {"ref"}


def test_two_zero_vectors_are_equal_and_one_zero_vector_is_not():
    """A padding token's embedding output is exactly zero on both sides (padding_idx): equal, not a
    mismatch with an undefined cosine; zero on one side only stays a mismatch."""
    import torch

    from backend.diagnostics.hidden_diff import compare_chunks
    from backend.diagnostics.mismatch import first_mismatch

    fed = torch.tensor([[0.0, 0.0, 1.0, 2.0], [0.0, 0.0, 1.0, 2.0]])
    reference = torch.tensor([[0.0, 0.0, 1.0, 2.0], [3.0, 0.0, 1.0, 2.0]])
    rows = compare_chunks(fed, reference, [0, 1], ["emb", "mid"], "ref")
    assert rows[0]["cosine"] == 1 and rows[0]["norm_ratio"] == 1 and rows[0]["relative_error"] == 0
    assert rows[2]["cosine"] == 0 and rows[2]["relative_error"] == 1
    assert first_mismatch(rows, ["emb", "mid"])["position"] == 1


def test_compare_chunks_refuses_other_shapes():
    import torch

    from backend import BadInput
    from backend.diagnostics.hidden_diff import compare_chunks

    with pytest.raises(BadInput, match="cannot compare"):
        compare_chunks(torch.zeros(2, 6), torch.zeros(3, 6), [0, 1], ["a", "b", "c"], "ref")


def test_train_vs_serve_finds_the_training_layers(bigram_setup, tmp_path):
    import torch

    from backend.data.features import load_feature_file
    from backend.diagnostics.hidden_diff import train_vs_serve
    from backend.diagnostics.mismatch import TrainServeResult
    from backend.engine.teacher import target_pass

    target, samples = bigram_setup.target, bigram_setup.samples
    ids = samples[0].input_ids
    passed = target_pass(target, ids, samples[0].loss_mask, TRAINED)
    path = tmp_path / "data_0.ckpt"
    torch.save(
        {
            "input_ids": torch.tensor(ids),
            "loss_mask": torch.tensor(samples[0].loss_mask),
            "hidden_state": torch.zeros(1, len(ids), 64),
            "aux_hidden_state": passed.features(TRAINED)[None].to(torch.bfloat16),
        },
        path,
    )
    features = load_feature_file(path, hidden_size=64)
    served = train_vs_serve(target, features, [2, 4, 5])
    assert served.training_aux_hf_indices == TRAINED
    assert served.first_mismatch.position == 0 and served.first_mismatch.chunk.startswith("chunk0")
    assert served.first_mismatch.cosine < 0.999 and served.summary[0].mismatching
    assert served.to_dict()["training_aux_hf_indices"] == TRAINED and served.input_ids == list(ids)
    # the diff tab's result (tasks.train_vs_serve_job) is written to JSON and read back the same
    assert TrainServeResult.from_dict(served.to_dict()) == served
    same = train_vs_serve(target, features, TRAINED)
    assert same.first_mismatch is None and all(s.mismatching == 0 for s in same.summary)
