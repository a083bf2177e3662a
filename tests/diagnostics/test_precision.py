"""The target's self-agreement between verify-sized and 1-token forwards: none in fp32 on CPU; in
bf16 at trained-model logit scales it exists, and it is what explains a replay diverging from generate."""

from __future__ import annotations


def replayed(target, draft, wiring, prompt, tokens):
    from backend.engine.records import StepRecord
    from backend.engine.replay import ReplayConfig, replay

    records = list(replay(target, draft, prompt, wiring, ReplayConfig(4, tokens, record=False)))
    steps = [r for r in records if isinstance(r, StepRecord)]
    return [records[0].first_token] + [t for s in steps for t in s.committed_ids], steps


def test_fp32_target_agrees_with_itself(pairs):
    from backend.diagnostics.precision import divergence_explained, self_disagreement
    from tests.support.oracle import plain_greedy

    pair = pairs["random-L6-eagle"]
    prompt = [1, 2, 3, 4, 5]
    continuation = plain_greedy(pair.target, prompt, 20)
    result = self_disagreement(pair.target, prompt, continuation, num_steps=3)
    assert (result.positions, result.disagreeing, result.width) == (len(continuation), [], 4)
    assert result.dtype == "float32" and result.device == "cpu"
    assert result.to_dict()["per_1000"] == 0.0 and "definition" in result.to_dict()
    output, steps = replayed(pair.target, pair.draft, pair.wiring, prompt, 20)
    assert output == continuation
    for index in (1, 7, 19):  # both histories recomputed by the target alone give the same token
        check = divergence_explained(pair.target, prompt, steps, index)
        assert (
            check["verify_argmax"] == check["decode_argmax"] == continuation[index] and not check["explained"]
        )


def test_a_bf16_divergence_is_the_targets_own_rounding(tmp_path):
    """A random target at std 0.02 in bf16: where the replay leaves generate's text, the target alone,
    run along the replay's verify chunks and along 1-token decodes, reproduces both tokens."""
    from backend.diagnostics.precision import divergence_explained, self_disagreement
    from backend.engine.loading import load_target
    from backend.engine.preflight import load_checked_draft
    from backend.engine.synthetic import (
        TargetShape,
        draft_config_dict,
        make_target,
        random_draft_tensors,
        save_draft,
    )
    from tests.support.oracle import plain_greedy

    shape = TargetShape(num_layers=8, hidden=256, vocab=500, heads=2, kv_heads=1, intermediate=704)
    model = make_target(tmp_path / "t", shape, init_std=0.02)
    config = draft_config_dict(model.config, draft_vocab=250)
    save_draft(tmp_path / "d", config, random_draft_tensors(config))
    target = load_target(tmp_path / "t", device="cpu", dtype="bf16")
    draft, report = load_checked_draft(tmp_path / "d", target)
    prompt = list(range(1, 17))
    expected = plain_greedy(target, prompt, 40)  # the first divergence is at token 32
    output, steps = replayed(target, draft, report.wiring, prompt, 40)
    assert self_disagreement(target, prompt, expected, 4).per_1000 > 0  # bf16 rounding exists here
    assert output != expected  # at this scale the bf16 replay leaves generate's text (token 32 here)
    first = next(i for i, (a, b) in enumerate(zip(output, expected, strict=True)) if a != b)
    check = divergence_explained(target, prompt, steps, first)
    assert check["explained"]
    assert (check["verify_argmax"], check["decode_argmax"]) == (output[first], expected[first])
