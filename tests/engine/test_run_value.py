"""A run is one typed value: the request as asked and what the pair resolved, stored flat and read
back (backend/run/run_value.py), older rows included."""

from __future__ import annotations

from dataclasses import replace

from backend.run.request import ReplayRequest
from backend.run.run_value import Resolved, asked_settings, params, read_params

# A replay's params as the layout before this one stored them (RunSettings.to_dict, stop 60): the
# tree flags as asked under "requested", the asked engine as engine_requested, no asked device.
OLDER_TREE = {
    "num_steps": 3, "max_new_tokens": 40, "record": True, "device": "cpu", "dtype": "float32",
    "target_placement": None, "target_forward": "lean", "wiring_source": "override [0, 2, 4] (HF)",
    "wiring_override": [0, 2, 4], "engine": "sglang", "engine_requested": "sglang", "draft_math": {},
    "topk": 4, "num_draft_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": 0, "seed": 5,
    "sampling_rule": "sglang", "draft_attention": "ancestors",
    "requested": {"num_steps": 3, "topk": 4, "num_draft_tokens": 8}, "decoding_notes": ["a note"],
}  # fmt: skip


def request(**settings) -> ReplayRequest:
    return ReplayRequest("t", "d", prompt_ids=(1, 2, 3), sample_ref="s", **settings)


def stored(request_: ReplayRequest, raw: dict) -> ReplayRequest:
    return ReplayRequest.stored("t", "d", [1, 2, 3], "s", None, asked_settings(raw))


def test_a_run_round_trips_through_its_params():
    asked = request(
        num_steps=3, max_new_tokens=40, aux_hf_indices=(0, 2, 4), engine="sglang", topk=4,
        num_draft_tokens=8, temperature=0.7, top_p=0.9, seed=5, device="cpu",
    )  # fmt: skip
    resolved = Resolved(
        engine="sglang", num_steps=3, topk=4, num_draft_tokens=8, sampling_rule="sglang",
        draft_attention="ancestors", mode="tree k=4 N=8 sampled T=0.7 top_p=0.9 seed=5",
        device="cpu", dtype="float32", decoding_notes=("a note",),
    )  # fmt: skip
    raw = params(asked, resolved)
    # the keys runs have always had keep their meaning: the resolved engine and shape, the asked override
    assert (raw["engine"], raw["engine_requested"], raw["wiring_override"]) == ("sglang", "sglang", [0, 2, 4])
    assert (raw["topk"], raw["topk_requested"], raw["device_requested"]) == (4, 4, "cpu")
    assert read_params(raw) == resolved
    assert stored(asked, raw) == asked
    assert not resolved.greedy and not resolved.greedy_chain


def test_an_older_run_reads_back_typed():
    resolved = read_params(OLDER_TREE)
    assert (resolved.topk, resolved.num_draft_tokens, resolved.engine) == (4, 8, "sglang")
    assert resolved.mode == "tree k=4 N=8 sampled T=0.7 top_p=0.9 seed=5"  # recomputed: not stored then
    asked = stored(None, OLDER_TREE)
    assert asked.decides == request(
        num_steps=3, max_new_tokens=40, aux_hf_indices=(0, 2, 4), engine="sglang", topk=4,
        num_draft_tokens=8, temperature=0.7, top_p=0.9, seed=5,
    ).decides  # fmt: skip
    # runs stored before trees and sampling existed are greedy chains
    chain = read_params({"num_steps": 4, "max_new_tokens": 64, "device": "cpu", "dtype": "float32"})
    assert (chain.topk, chain.sampling_rule, chain.mode, chain.greedy_chain) == (
        1,
        None,
        "chain greedy",
        True,
    )
    assert read_params(None) == replace(Resolved(), mode="chain greedy")
    assert read_params({"temperature": "0.5", "topk": "x"}).topk == 1  # unreadable: the default


def test_a_stored_value_this_version_refuses_leaves_no_request_to_match():
    """A run stored under looser bounds (max new tokens 40,000 before the 32,768 cap, an engine this
    version does not know) answers no request: read back with a default it would be reused for a
    request it never ran."""
    for changed in (
        {"max_new_tokens": 40000},
        {"engine_requested": "trt"},
        {"seed": -4},
        {"max_new_tokens": None},
    ):
        assert stored(None, {**OLDER_TREE, **changed}) is None, changed
    assert ReplayRequest.stored("t", "d", [], "s", None, {}) is None  # nothing to replay
    assert (
        read_params({"num_steps": float("inf"), "topk": float("nan")}).num_steps == 4
    )  # unreadable: default


def test_what_a_request_decides_is_compared_by_equality():
    base = request(num_steps=3, max_new_tokens=32)
    assert base.decides == request(num_steps=3, max_new_tokens=32, device="cuda", record=False).decides
    assert base.decides == replace(base, prompt_ids=(9,), sample_ref="other").decides  # prompt apart
    assert base.decides == request(num_steps=3, max_new_tokens=32, topk=None).decides  # None: a chain
    assert base.decides != request(num_steps=3, max_new_tokens=33).decides


def test_stored_metrics_read_back_typed():
    from backend.run.metrics import RunMetrics

    stored = {"mean_accept_length": 1.85, "per_position_marginal": [0.5, None], "accept_histogram": [3, 1]}
    metrics = RunMetrics.from_stored(stored)
    assert (metrics.mean_accept_length, metrics.per_position_marginal) == (1.85, (0.5, None))
    assert metrics.expected_accept_length is None and metrics.draft_ms_total == 0.0  # not stored: none
    assert (
        RunMetrics.from_stored(None) == RunMetrics()
        and RunMetrics.from_stored({"verify_steps": "x"}).verify_steps is None
    )
