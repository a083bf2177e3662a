"""Checkpoint doctor: vocab coverage of a dataset, regenerated d2t mappings, the combined report."""

from __future__ import annotations

from backend.data.samples import Sample


def test_doctor_coverage_and_regenerated_mapping(bigram_setup, tmp_path):
    from backend.diagnostics.doctor import compare_mappings, coverage
    from tests.support.synthetic import draft_config_dict, random_draft_tensors, save_draft

    root, target, samples = bigram_setup.root, bigram_setup.target, bigram_setup.samples
    assert coverage(str(root / "right"), 48, samples).all_tokens == 1.0  # no mapping: every token reachable
    config = draft_config_dict(target.model.config, draft_vocab=24)
    save_draft(tmp_path / "a", config, random_draft_tensors(config, seed=1, used_target_ids=list(range(24))))
    save_draft(
        tmp_path / "b", config, random_draft_tensors(config, seed=1, used_target_ids=list(range(24, 48)))
    )
    save_draft(tmp_path / "c", config, random_draft_tensors(config, seed=2, used_target_ids=list(range(24))))
    cover = coverage(str(tmp_path / "a"), 48, [Sample(list(range(48)), [0] * 24 + [1] * 24, 24)])
    assert cover.all_tokens == 0.5 and cover.loss_masked_tokens == 0.0
    assert compare_mappings(str(tmp_path / "a"), str(tmp_path / "b")).regenerated
    assert not compare_mappings(str(tmp_path / "a"), str(tmp_path / "c")).regenerated
    assert not compare_mappings(str(tmp_path / "a"), str(root / "right")).comparable  # right has no d2t


def test_doctor_report(bigram_setup, tmp_path):
    from backend.diagnostics.doctor import doctor

    root, samples = bigram_setup.root, bigram_setup.samples
    result = doctor(str(root / "right"), str(root / "target"), samples, other_draft=str(root / "miswired"))
    assert result.preflight.ok and result.preflight.aux_hf_indices == [0, 2, 4]
    assert result.coverage.all_tokens == 1.0 and result.coverage.n_tokens == 4 * 40
    assert result.mapping_comparison.comparable is False
    assert result.draft == str(root / "right") and result.target == str(root / "target")
    alone = doctor(str(root / "right"), str(root / "target"))
    assert alone.coverage is None and alone.mapping_comparison is None
