"""Hidden-state references of a stored run: another wiring, a twin run, the target's own hidden,
a training feature file; rows land in token_stats under the reference's label."""

from __future__ import annotations

import pytest

from backend import BadInput
from backend.service.reference_spec import ReferenceSpec
from tests.support.models import TRAINED


@pytest.fixture()
def runs(bigram_setup, db_url):
    """Two identical recorded runs of the mis-wired bigram draft: (db_url, [run ids])."""
    from backend.run.request import ReplayRequest
    from backend.service.database import open_database
    from backend.service.jobs import run_plan
    from backend.service.plan import resolve
    from tests.support.models import load_draft

    target, samples = bigram_setup.target, bigram_setup.samples
    draft, _ = load_draft(bigram_setup.root / "miswired", target)
    request = ReplayRequest(
        str(bigram_setup.target_dir),
        str(bigram_setup.root / "miswired"),
        prompt_ids=tuple(samples[0].prompt_ids),
        num_steps=3,
        max_new_tokens=20,
    )
    database = open_database(db_url)
    return db_url, [
        run_plan(database, target, draft, resolve(request, target, draft)).run_id for _ in range(2)
    ]


def test_run_references(runs):
    from backend.run.records import no_progress
    from backend.service.references import compute_reference
    from backend.service.runs import token_stat_references, token_stats

    url, run_ids = runs
    seen = []
    result = compute_reference(
        url,
        run_ids[0],
        ReferenceSpec("wiring", TRAINED),
        lambda fraction, message: seen.append((fraction, message)),
    )
    assert seen[0] == (0.05, "loading the run's features") and all(0 <= f <= 1 for f, _ in seen)
    rows = token_stats(url, run_ids[0], result.reference)
    assert token_stat_references(url, run_ids[0]) == ["wiring HF [0, 2, 4]"]
    chunk0 = [r for r in rows if r["chunk"] == "hf2"]
    assert chunk0 and all(r["cosine"] < 0.99 for r in chunk0)  # HF 2 fed where HF 0 is the reference
    assert {r["position"] for r in rows} >= set(range(8))
    twin = compute_reference(url, run_ids[0], ReferenceSpec("run", run_id=run_ids[1]), no_progress)
    rows = token_stats(url, run_ids[0], twin.reference)
    assert rows and all(r["cosine"] > 0.9999 for r in rows)
    hidden = compute_reference(url, run_ids[0], ReferenceSpec("target_hidden"), no_progress)
    assert hidden.rows > 0 and hidden.reference == "target hidden (draft out)"
    again = compute_reference(url, run_ids[0], ReferenceSpec("wiring", TRAINED), no_progress)
    assert len(token_stats(url, run_ids[0], again.reference)) == again.rows == result.rows  # replaced


def test_training_features_as_a_reference(runs, bigram_setup, tmp_path):
    import torch

    from backend.diagnostics.mismatch import ChunkRow
    from backend.engine.teacher import target_pass
    from backend.run.records import no_progress
    from backend.service.references import compute_reference
    from backend.service.runs import get_run, token_stats

    url, run_ids = runs
    run = get_run(url, run_ids[0])
    sequence = run.prompt_ids + run.output_ids
    passed = target_pass(bigram_setup.target, sequence, [0] * len(sequence), run.aux_hf_indices)
    path = tmp_path / "data_0.ckpt"
    torch.save(
        {"input_ids": torch.tensor(sequence), "aux_hidden_state": passed.features(run.aux_hf_indices)[None]},
        path,
    )
    result = compute_reference(url, run_ids[0], ReferenceSpec("features", path=str(path)), no_progress)
    assert result.reference == "features data_0.ckpt"
    rows = token_stats(url, run_ids[0], result.reference)
    assert rows and all(r["cosine"] > 0.9999 for r in rows)  # the same states the run fed
    assert result.warning is None and result.positions == len(sequence) - 1
    # the stored rows read back as the step viewer reads them
    assert [ChunkRow.from_dict(r).to_dict() for r in rows] == rows
    # the features of another sequence: compared only where the tokens agree, and said so
    other = sequence[:3] + [(t + 1) % 40 for t in sequence[3:]]
    torch.save(
        {"input_ids": torch.tensor(other), "aux_hidden_state": passed.features(run.aux_hf_indices)[None]},
        path,
    )
    mismatched = compute_reference(url, run_ids[0], ReferenceSpec("features", path=str(path)), no_progress)
    assert mismatched.positions == 3 and "holds another sequence" in mismatched.warning
    assert "first 3 of" in mismatched.warning


def test_bad_references_are_bad_input(runs):
    from backend.run.records import no_progress
    from backend.service.references import compute_reference

    url, run_ids = runs
    for reference, reason in [
        (ReferenceSpec("wiring", [0, 2, 99]), "three HF indices in 0..8"),
        (ReferenceSpec("run", run_id=999), "no run 999"),
        (ReferenceSpec("tea leaves"), "unknown reference kind"),
    ]:
        with pytest.raises(BadInput, match=reason):
            compute_reference(url, run_ids[0], reference, no_progress)
    with pytest.raises(BadInput, match="no run 999"):
        compute_reference(url, 999, ReferenceSpec("target_hidden"), no_progress)
