"""Per-request server numbers matched to replays of the same prompts, the worst replayed through the
job runner, and a ModelOpt speculation_profile.json written from runs and read back."""

from __future__ import annotations

import json

import pytest

from backend import BadInput
from backend.defaults import DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET
from backend.service.per_request import ServedNumbers
from tests.support import per_request_payloads as P

K = 3
TOKENS = 16


def observe(db: str, text: str, name: str, **paths):
    """The service's one entry, on a file as the page uploads it."""
    from backend.service.per_request import ServedRequests, observe_requests

    return observe_requests(db, ServedRequests(data=text.encode(), name=name), **paths)


def served_file(prompts: list[list[int]], requests: list[list[int]]) -> str:
    """A vLLM file whose requests carry the given prompts (what a server answered for them)."""
    lines = []
    for prompt, a_list in zip(prompts, requests, strict=True):
        lines.append(
            {
                "id": "x",
                "choices": [{"index": 0, "text": "", "finish_reason": "length", "prompt_token_ids": prompt}],
                "usage": {"completion_tokens": TOKENS},
                "metrics": {"speculative_decoding": P.vllm_block(a_list, K, detailed=True)},
            }
        )
    return P.jsonl(lines)


def test_without_replays_the_rows_say_so_and_the_worst_come_first(tmp_path):
    db = f"sqlite:///{tmp_path / 'x.db'}"
    result = observe(db, P.vllm(), "vllm.jsonl", draft_path=str(DEMO_DRAFTS / "final"))
    assert result.replay.runs == 0 and result.replay.accept_lengths == []
    assert all(row.replay_accept_length is None for row in result.rows)
    served = [result.rows[i].served_accept_length for i in result.worst]
    assert served == sorted(served) and len(served) == 3  # the streamed request has no prompt
    assert result.num_steps == K
    # the JSON `observe --requests --json` prints reads back as the same result
    assert ServedNumbers.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_text_prompts_need_the_target_tokenizer(tmp_path):
    db = f"sqlite:///{tmp_path / 'x.db'}"
    response = json.loads(P.vllm().splitlines()[0])
    del response["choices"][0]["prompt_token_ids"]
    text = P.jsonl([{"request": {"prompt": "def f(x):"}, "response": response}])
    without = observe(db, text, "t.jsonl")
    assert "give --target" in without.replay.unmatched_text_prompts
    with_target = observe(db, text, "t.jsonl", target_path=str(DEMO_TARGET))
    assert with_target.requests[0].prompt_ids and with_target.replay.unmatched_text_prompts is None


def test_chat_messages_are_rendered_with_the_target_template(tmp_path):
    from backend.engine.loading import load_tokenizer

    response = json.loads(P.vllm().splitlines()[0])
    del response["choices"][0]["prompt_token_ids"]
    messages = [{"role": "user", "content": "def f(x):"}]
    text = P.jsonl([{"request": {"messages": messages}, "response": response}])
    result = observe(f"sqlite:///{tmp_path / 'x.db'}", text, "c.jsonl", target_path=str(DEMO_TARGET))
    rendered = "<|user|>\ndef f(x):\n<|assistant|>\n"  # demo/target/chat_template.jinja, generation prompt on
    expected = load_tokenizer(DEMO_TARGET)(rendered, add_special_tokens=False)["input_ids"]
    assert result.requests[0].prompt_ids == expected


def test_export_needs_finished_runs(tmp_path):
    from backend.service.per_request import profile_from_runs

    with pytest.raises(BadInput, match="run 7: no such run"):
        profile_from_runs(f"sqlite:///{tmp_path / 'x.db'}", [7])


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """Two greedy replays of the demo pair on the first two eval prompts, K = 3."""
    from backend.data.samples import sample_at
    from backend.run.request import ReplayRequest
    from backend.service.jobs import run_replay

    db = f"sqlite:///{tmp_path_factory.mktemp('per_request') / 'x.db'}"
    prompts, runs = [], []
    pair = (str(DEMO_TARGET), str(DEMO_DRAFTS / "final"))
    for index in range(2):
        prompt = list(sample_at(DEMO_EVAL, index).prompt_ids)
        request = ReplayRequest(*pair, prompt_ids=tuple(prompt), num_steps=K, max_new_tokens=TOKENS)
        outcome = run_replay(request, db)
        prompts.append(prompt)
        runs.append(outcome)
    return db, prompts, runs


@pytest.mark.slow
def test_requests_are_matched_to_replays_of_their_prompt_and_the_worst_replayed(replayed):
    from backend.service.per_request import replay_worst, with_replays

    db, prompts, runs = replayed
    text = served_file(prompts, [[0, 0, 1], [3, 2, 3]])  # the first accepts badly when served
    result = observe(db, text, "served.jsonl", draft_path=str(DEMO_DRAFTS / "final"))
    rows = result.rows
    assert [row.replay_run for row in rows] == [runs[0].run_id, runs[1].run_id]
    assert rows[0].replay_accept_length == pytest.approx(runs[0].metrics.mean_accept_length)
    assert result.replay.matched == 2 and result.worst == [0, 1]
    again = replay_worst(db, result, 1, str(DEMO_TARGET), str(DEMO_DRAFTS / "final"))
    assert [row.request for row in again] == [0]
    # the same prompt, draft and K replayed again by the job runner: fp32 greedy gives the same run
    assert again[0].replay_accept_length == pytest.approx(runs[0].metrics.mean_accept_length)
    assert again[0].served_minus_replay == pytest.approx(1 + 1 / 3 - again[0].replay_accept_length)
    merged = with_replays(result, again)
    assert merged.rows[0].replay_run == again[0].replay_run and merged.rows[1] == rows[1]
    assert merged.replayed_worst == again


@pytest.mark.slow
def test_a_run_pair_exports_as_a_modelopt_profile_and_reads_back(replayed, tmp_path):
    from backend.data.per_request import read_requests
    from backend.service.per_request import export_profile

    db, _, runs = replayed
    path, written = export_profile(db, [r.run_id for r in runs], str(tmp_path))
    assert path.name == "speculation_profile.json"
    profile = json.loads(path.read_text())
    assert profile == written
    steps = [s.accepted_count for r in runs for s in r.steps]
    pooled = 1 + sum(steps) / len(steps)
    per_run = sum(r.metrics.mean_accept_length for r in runs) / len(runs)
    assert profile["mean_accept_length"] == pytest.approx(pooled, abs=1e-6)
    assert profile["mean_accept_length_per_request"] == pytest.approx(per_run, abs=1e-6)
    back = read_requests(path.read_text(), str(path))
    assert back.format == "modelopt" and back.pooled.accept_length == pytest.approx(pooled, abs=1e-6)
    assert back.pooled.verify_steps == len(steps) and back.profile.disagreements == []


def cli(*args: str):
    from tests.support.cli import run_cli

    return run_cli(*args)


CLI_FILES = {
    "vllm.jsonl": (P.vllm, P.REQUESTS),
    "sglang.jsonl": (lambda: P.sglang(old_names_for=()), P.REQUESTS + [[1, 2], [0]]),
    "sglext.jsonl": (P.sglext, P.REQUESTS + [[1, 2], [0]]),
    "trtllm.jsonl": (P.trtllm, P.REQUESTS),
    "llamacpp.jsonl": (P.llamacpp, P.REQUESTS),
    "speculation_profile.json": (P.modelopt, P.REQUESTS),
}


@pytest.mark.slow
def test_every_format_through_the_cli(tmp_path):
    db = f"sqlite:///{tmp_path / 'x.db'}"
    for name, (write, requests) in CLI_FILES.items():
        path = tmp_path / name
        path.write_text(write())
        done = cli("observe", "--requests", str(path), "--num-speculative-tokens", "3", "--db", db, "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        truth = P.truth(requests)
        assert report["pooled"]["accept_length"] == pytest.approx(truth["pooled_accept_length"], abs=0.01)
        assert report["pooled"]["definitions"]["pooled_accept_length"].startswith("pooled accept length")
        if name != "speculation_profile.json":
            served = [
                r["accept_length"] for r in report["requests"] if r["status"] in ("ok", "no-verify-steps")
            ]
            assert len(served) == len(truth["accept_length"]) and all(
                (a is None and b is None) or abs(a - b) <= 0.01
                for a, b in zip(served, truth["accept_length"], strict=True)
            ), name
    reads = tmp_path / "server_info.jsonl"
    reads.write_text(P.server_info_reads(P.REQUESTS[:2], P.REQUESTS[3:]))
    done = cli("observe", "--requests", str(reads), "--db", db, "--json")
    window = json.loads(done.stdout)["window"]["accept_length"]
    assert window == pytest.approx(P.truth(P.REQUESTS[3:])["pooled_accept_length"], abs=0.01)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(P.vllm().replace('"num_spec_steps": 3', '"num_spec_steps": -3', 1))
    refused = cli("observe", "--requests", str(bad), "--db", db)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "bad.jsonl: line 1:" in refused.stderr and "num_spec_steps is -3" in refused.stderr
    worst = cli("observe", "--requests", str(tmp_path / "vllm.jsonl"), "--replay-worst", "1", "--db", db)
    assert worst.returncode == 2 and "--replay-worst needs --draft" in worst.stderr
    stray = cli("observe", "--requests", str(tmp_path / "vllm.jsonl"), "--runs", "1", "--db", db)
    assert stray.returncode == 2 and "--runs goes with --export-profile" in stray.stderr
