"""The target's self-agreement between verify-sized and 1-token forwards: none to report in fp32 on CPU."""

from __future__ import annotations


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
    check = divergence_explained(pair.target, prompt + continuation[:4], continuation[4:8], row=2)
    assert check["verify_argmax"] == check["decode_argmax"] == continuation[7] and not check["explained"]
