"""A run replayed under llama.cpp's reading is recorded and read back like any other: fewer drafts near the
end and a plain decode for the last token are stored, and every metric counts verify steps only."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("max_new", [2, 11])
def test_a_recorded_llamacpp_run_is_stored_and_its_metrics_count_verify_steps(
    pairs, db_url, tmp_path, max_new
):
    import json
    import shutil

    from backend.run.request import ReplayRequest
    from backend.service.jobs import run_replay
    from backend.service.runs import get_run_with_steps

    pair = pairs["copy-L4-bigram"]
    draft = shutil.copytree(pair.draft_dir, tmp_path / "draft")  # llama.cpp's converter needs the key
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**config, "draft_vocab_size": config["vocab_size"]}))
    request = ReplayRequest(
        str(pair.target_dir), str(draft), prompt_ids=(1, 5, 9), num_steps=3,
        max_new_tokens=max_new, engine="llamacpp",
    )  # fmt: skip
    outcome = run_replay(request, db_url)
    run, steps = get_run_with_steps(db_url, outcome.run_id)
    drafted = [len(s.drafted_ids) for s in steps]
    verify = [s for s in steps if s.drafted_ids]
    assert len(run.output_ids) == max_new and all(d <= 3 for d in drafted)
    assert run.metrics["verify_steps"] == len(verify)
    if max_new == 2:  # the first token, then one plain decode: no verify step, no accept length
        assert drafted == [0] and run.metrics["mean_accept_length"] is None
    else:
        accepted = sum(s.accepted_count for s in verify)
        assert run.metrics["mean_accept_length"] == pytest.approx(1 + accepted / len(verify))
        assert run.metrics["acceptance_rate"] == pytest.approx(accepted / sum(drafted))
