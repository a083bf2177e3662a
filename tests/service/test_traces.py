"""The replay over a trace (backend/target/trace.py): the target computed once per sample, then only the
draft runs. In fp32 it gives the step replay's tokens and accepted counts on every step; a trace is
kept and reused; a trace that does not fit what is asked is refused in one line."""

from __future__ import annotations

import pytest

from backend import BadInput


def _requests(pair, via: str, count: int = 3, tokens: int = 20, steps: int = 3, **tree) -> list:
    import torch

    from backend.run.request import ReplayRequest

    generator = torch.Generator().manual_seed(7)
    return [
        ReplayRequest(
            str(pair.target_dir),
            str(pair.draft_dir),
            prompt_ids=tuple(
                torch.randint(1, pair.target.vocab_size, (3 + 2 * i,), generator=generator).tolist()
            ),
            num_steps=steps,
            max_new_tokens=tokens,
            via=via,
            **tree,
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("name", ["copy-L5-context", "copy-L4-bigram", "random-L6-eagle"])
def test_the_replay_over_a_trace_is_the_step_replay(pairs, tmp_path, name):
    from backend.service.batch_jobs import run_in_batches
    from backend.service.jobs import run_replay
    from backend.service.runs import get_run
    from backend.service.traces import trace_dir

    pair, db_url = pairs[name], f"sqlite:///{tmp_path / 'db.sqlite'}"
    stepped = [run_replay(r, db_url) for r in _requests(pair, "step")]
    traced = run_in_batches(_requests(pair, "trace"), db_url)  # the traces captured together, then kept
    assert any(o.metrics.accepted_drafts_per_step for o in stepped) or name == "random-L6-eagle"
    for step, trace in zip(stepped, traced, strict=True):
        assert trace.output_ids == step.output_ids
        assert [s.accepted_count for s in trace.steps] == [s.accepted_count for s in step.steps]
        assert [s.drafted_ids for s in trace.steps] == [s.drafted_ids for s in step.steps]
        assert [s.bonus_id for s in trace.steps] == [s.bonus_id for s in step.steps]
        assert trace.metrics.mean_accept_length == step.metrics.mean_accept_length
    run = get_run(db_url, traced[0].run_id)
    assert run.resolved.target_forward.startswith("trace, captured by local (")
    from backend.service.where_lost import where_lost_over

    (losses,) = where_lost_over(db_url, [o.run_id for o in traced]).drafts  # it says where the runs came from
    assert any(n.startswith("3 of 3 runs replayed over a trace, captured by local (") for n in losses.notes)
    kept = sorted(trace_dir(tmp_path / "artifacts").glob("*.safetensors"))
    assert len(kept) == 3
    again = run_replay(_requests(pair, "trace")[1], db_url)  # read back, not captured again
    assert again.output_ids == stepped[1].output_ids
    assert sorted(trace_dir(tmp_path / "artifacts").glob("*.safetensors")) == kept


@pytest.mark.parametrize("name", ["copy-L5-context", "random-L6-eagle"])
def test_a_tree_over_a_trace_is_the_tree_step_replay(pairs, tmp_path, name):
    """SGLang's (3, 4, 8) tree: the rows of nodes on the target's own continuation come from the trace,
    the others no target computed (stored as not recorded); the accepted paths, counts, output and
    expected accepted drafts are the step replay's."""
    from backend.service.batch_jobs import run_in_batches
    from backend.service.jobs import run_replay

    pair, db_url = pairs[name], f"sqlite:///{tmp_path / 'db.sqlite'}"
    shape = {"topk": 4, "num_draft_tokens": 8}
    stepped = [run_replay(r, db_url) for r in _requests(pair, "step", **shape)]
    traced = run_in_batches(_requests(pair, "trace", **shape), db_url)
    for step, trace in zip(stepped, traced, strict=True):
        assert trace.output_ids == step.output_ids
        assert [s.tree.accepted_path for s in trace.steps] == [s.tree.accepted_path for s in step.steps]
        assert [s.accepted_count for s in trace.steps] == [s.accepted_count for s in step.steps]
        assert [s.tree.expected_accepted for s in trace.steps] == [
            s.tree.expected_accepted for s in step.steps
        ]
        for s, t in zip(step.steps, trace.steps, strict=True):  # a known row is the step replay's own
            assert all(b is None or a == b for a, b in zip(s.tree.argmax, t.tree.argmax, strict=True))
            assert t.tree.argmax[0] == s.tree.argmax[0]
    assert any(None in s.tree.argmax for t in traced for s in t.steps) or name == "copy-L5-context"


def test_sampled_decoding_over_a_trace_gives_each_step_s_expected_acceptance(pairs, tmp_path):
    """--via trace --temperature: the rounds follow the trace's greedy path (the greedy output and its
    counts), and each step's acceptance is its expectation at the temperature: with --top-k 5 (within
    the trace's top 8) each draft's acceptance probability is the target's own p_T(d) at that row,
    computed here from a plain forward over the same tokens; the run says it is expected."""
    import torch

    from backend.engine.sampling import Sampling, target_distribution
    from backend.service.batch_jobs import run_in_batches
    from backend.service.jobs import run_replay
    from backend.service.runs import get_run

    pair, db_url = pairs["copy-L5-context"], f"sqlite:///{tmp_path / 'db.sqlite'}"
    sampling = Sampling(0.8, top_k=5, seed=3)
    greedy = [run_replay(r, db_url) for r in _requests(pair, "step")]
    requests = _requests(pair, "trace", temperature=0.8, top_k=5, seed=3)
    traced = run_in_batches(requests, db_url)
    checked = 0
    for request, plain, trace in zip(requests, greedy, traced, strict=True):
        assert trace.output_ids == plain.output_ids
        assert [s.accepted_count for s in trace.steps] == [s.accepted_count for s in plain.steps]
        prompt = list(request.prompt_ids)
        for step in trace.steps:
            context = prompt + trace.output_ids[: step.position - len(prompt)]
            ids = torch.tensor([context + [step.pending_token] + step.drafted_ids])
            with torch.inference_mode():
                logits = pair.target.model(ids).logits[0, step.position :]
            probs = target_distribution(logits, sampling)
            for row, (draft, accept) in enumerate(zip(step.drafted_ids, step.tree.accept_probs, strict=True)):
                if accept is not None:  # a row the trace holds: every draft before it is the target's token
                    assert accept == pytest.approx(float(probs[row, draft]), rel=1e-4, abs=1e-6)
                    checked += 1
    assert checked > 10
    assert any(
        s.tree.expected_accepted not in (0.0, float(s.accepted_count)) for t in traced for s in t.steps
    )
    run = get_run(db_url, traced[0].run_id)
    assert run.resolved.mode.endswith("expected over the trace's greedy path")


def test_a_trace_that_does_not_fit_is_refused(pairs, tmp_path):
    import torch

    from backend.engine.loading import load_target
    from backend.run.request import ReplayRequest
    from backend.service.traces import load_trace, save_trace, target_identity
    from backend.target.trace import MARGIN
    from backend.target.trace_capture import capture_traces

    pair = pairs["copy-L4-bigram"]
    target = load_target(str(pair.target_dir), "cpu", "fp32")
    (trace,) = capture_traces(target, [[3, 4, 5]], 8, [1, 2, 3])
    assert len(trace.continuation) == 8 + MARGIN and trace.states[1].shape[0] == 3 + 8 + MARGIN - 1
    assert trace.top_ids[2, 0] == trace.continuation[0] and trace.top_ids[3, 0] == trace.continuation[1]
    identity = target_identity(pair.target_dir)
    path = save_trace(tmp_path, "k", trace, identity, str(pair.target_dir))
    back = load_trace(path, identity)
    assert back.continuation == trace.continuation and torch.equal(back.states[2], trace.states[2])
    with pytest.raises(BadInput, match="changed since"):
        load_trace(path, "another")
    with pytest.raises(BadInput, match="holds 8 new tokens; the replay asks 9"):
        trace.check_fits(9, 3, [1, 2, 3])
    with pytest.raises(BadInput, match=r"not at HF \[4\]"):
        trace.check_fits(8, 3, [1, 2, 4])
    with pytest.raises(BadInput, match="at most K"):
        trace.check_fits(8, MARGIN + 1, [1, 2, 3])
    (tmp_path / "junk.safetensors").write_bytes(b"not a file")
    with pytest.raises(BadInput, match="junk.safetensors: not a trace file"):
        load_trace(tmp_path / "junk.safetensors", identity)
    with pytest.raises(BadInput, match="a sampled tree replays with --via step"):
        ReplayRequest("t", "d", prompt_ids=(1,), via="trace", temperature=0.7, topk=4, num_draft_tokens=8)
    with pytest.raises(BadInput, match="needs one of --url URL"):
        ReplayRequest("t", "d", prompt_ids=(1,), via="trace", trace_from="vllm")
    with pytest.raises(BadInput, match="needs one of --url URL"):
        ReplayRequest(
            "t", "d", prompt_ids=(1,), via="trace", trace_from="vllm", trace_url="u", trace_launch=True
        )


def test_vllm_s_top_log_probabilities_become_a_trace_s_rows():
    """What vLLM answers of each generated position (top log-probabilities naming token ids) read as the
    trace's rows: most likely first, a lower bound of the entropy, a near-tie where the top two meet."""
    import math

    import torch

    from backend.service.vllm_trace import _entropy_lower_bound, _near_tie, _top
    from backend.target.trace import TOP

    rows = [
        {"token_id:5": -0.1, "token_id:9": -2.5, "token_id:7": -3.0},
        {"token_id:3": -0.69314, "token_id:4": -0.69316},
    ]
    ids, values = _top({"top_logprobs": rows}, 2, "vLLM at u")
    assert ids.shape == (2, TOP) and ids[0, :3].tolist() == [5, 9, 7] and ids[1, :2].tolist() == [3, 4]
    assert ids[0, 3] == -1 and values[0, 3] == -math.inf
    assert _near_tie(values).tolist() == [False, True]
    entropy = _entropy_lower_bound(values)
    probs = torch.tensor([math.exp(-0.1), math.exp(-2.5), math.exp(-3.0)])
    exact_top = float(-(probs * probs.log()).sum())
    assert exact_top < float(entropy[0]) < exact_top + 0.2 and 0.69 < float(entropy[1]) < 0.70
    with pytest.raises(BadInput, match="answered 2 rows of top log-probabilities for 3 tokens"):
        _top({"top_logprobs": rows}, 3, "vLLM at u")


def test_a_guess_is_verified_and_a_trace_ends_where_its_replays_stop_reading(pairs):
    """A capture that verifies a guess (trace_capture.py) keeps the target's own continuation whether the
    guess is right or wrong, in fewer forwards when it is right; a trace for replays that stop at an id
    ends MARGIN tokens past its first one, and a replay that reads further is refused it."""
    import torch

    from backend.engine.loading import load_target
    from backend.target.trace import MARGIN
    from backend.target.trace_capture import capture_traces

    target = load_target(str(pairs["copy-L4-bigram"].target_dir), "cpu", "fp32")
    prompts, indices = [[3, 4, 5], [9, 8, 7, 6, 5]], [1, 3]
    rounds = []
    forward_many = target.runner.forward_many

    def counted(*args, **kwargs):
        rounds[-1] += 1
        return forward_many(*args, **kwargs)

    target.runner.forward_many = counted
    captured = {}
    plain = None
    for name in ("plain", "right", "wrong"):
        rounds.append(0)
        if name == "plain":
            guesses = None
        elif name == "right":
            guesses = [t.continuation for t in plain]
        else:  # wrong from the sixth token on
            guesses = [t.continuation[:5] + [(t.continuation[5] + 1) % 50] * 20 for t in plain]
        captured[name] = capture_traces(target, prompts, 24, indices, guesses)
        plain = captured["plain"]
    for name in ("right", "wrong"):
        for base, got in zip(plain, captured[name], strict=True):
            assert got.continuation == base.continuation and len(got.continuation) == 24 + MARGIN
            # the argmax of every row; the rest of the top 8 may trade places on a near-tie, rounded apart
            assert torch.equal(got.top_ids[:, 0], base.top_ids[:, 0])
            torch.testing.assert_close(got.top_logprobs[:, 0], base.top_logprobs[:, 0], rtol=1e-4, atol=1e-4)
            for i in indices:
                assert got.states[i].shape == base.states[i].shape
                # a chunk's rows are summed in another order than one-token decodes: rounding apart
                assert (got.states[i] - base.states[i]).norm() <= 1e-5 * base.states[i].norm()
    assert rounds[0] == 24 + MARGIN  # the prefill, then a forward per token
    assert rounds[1] <= 4 < rounds[2] < rounds[0]  # chunks of 16, 32 hold; the wrong guess decodes on

    stop = plain[0].continuation[3]  # an id the first prompt's continuation meets early
    (cut,) = capture_traces(target, prompts[:1], 24, indices, stops=[[frozenset({stop})]])
    first = cut.continuation.index(stop)
    assert len(cut.continuation) == first + 1 + MARGIN == cut.states[1].shape[0] - 3 + 1
    assert cut.continuation == plain[0].continuation[: len(cut.continuation)]
    cut.check_fits(24, 3, indices, frozenset({stop}))
    with pytest.raises(BadInput, match=f"ends after {first + 1 + MARGIN} tokens .* may read {24 + MARGIN}"):
        cut.check_fits(24, 3, indices, frozenset())  # --ignore-eos reads to the budget


def test_the_sample_s_answer_is_the_guess(tmp_path):
    """trace_guesses.answers: the answer after the prompt in the request's sample, from a JSONL file the
    request names by "path#index" or a stored sample; nothing for a file that cannot be read."""
    import json

    from backend.run.request import ReplayRequest
    from backend.service.database import open_database
    from backend.service.datasets import get_samples, import_dataset
    from backend.service.trace_guesses import answers

    path = tmp_path / "s.jsonl"
    records = [([1, 2, 3, 4, 5], [0, 0, 1, 1, 1]), ([6, 7, 8, 9], [0, 0, 0, 1])]
    path.write_text("".join(json.dumps({"input_ids": i, "loss_mask": m}) + "\n" for i, m in records))
    db_url = f"sqlite:///{tmp_path / 'db.sqlite'}"

    def request(prompt, ref=None, sample_id=None):
        return ReplayRequest("t", "d", prompt_ids=prompt, sample_ref=ref, sample_id=sample_id)

    database = open_database(db_url)
    asked = [request((1, 2), f"{path}#0"), request((6, 7, 8), f"{path}#1"), request((5,), "prompt")]
    assert answers(asked, database, 100) == {(1, 2): [3, 4, 5], (6, 7, 8): [9]}
    dataset, _ = import_dataset(db_url, path)
    stored = get_samples(db_url, dataset)[1]
    assert answers([request((6, 7, 8), "dataset 1 #1", stored.id)], database, 100) == {(6, 7, 8): [9]}
    assert answers([request((1, 2), f"{tmp_path / 'gone.jsonl'}#0")], database, 100) == {}


def test_a_dflash_draft_replays_over_a_trace_as_step_by_step(tmp_path):
    """A DFlash draft proposes through the target's head: beside a trace (no target loaded) the head is
    read from the target's weights (replay --via trace ended in an internal error before)."""
    from dataclasses import replace

    from backend.run.request import ReplayRequest
    from backend.service.jobs import run_replay

    db_url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    asked = ReplayRequest(
        "demo/smollm2/target", "demo/smollm2/drafts/dflash", prompt_ids=(1, 4093, 198, 1604, 2683),
        num_steps=7, max_new_tokens=16,
    )  # fmt: skip
    step = run_replay(asked, db_url)
    traced = run_replay(replace(asked, via="trace"), db_url)
    assert traced.output_ids == step.output_ids
    assert [s.accepted_count for s in traced.steps] == [s.accepted_count for s in step.steps]
