"""Server numbers beside the replay: an observation is parsed, linted, stored and compared with real
replays of the demo pair; serve-check talks to a local HTTP server that answers in SGLang's /generate
shape (it stands in for the engine's network interface only)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "support" / "serving"


def demo_replay(db_url, num_steps, tokens=48):
    from backend.defaults import DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET
    from backend.run.request import ReplayRequest
    from backend.service.jobs import run_replay

    record = json.loads(DEMO_EVAL.read_text().splitlines()[0])
    request = ReplayRequest(
        str(DEMO_TARGET),
        str(DEMO_DRAFTS / "final"),
        num_steps=num_steps,
        max_new_tokens=tokens,
        prompt_ids=tuple(record["input_ids"][: record["n_prompt_tokens"]]),
        record=False,
    )
    return run_replay(request, db_url)


def test_the_seed_situation_beside_the_replay(db_url):
    """An SGLang log in the seed's situation (topk 1, steps 1, draft tokens 16 rewritten to 2, accept
    len 1.90) next to replays of the demo pair at K = 1, and then at K = 4 (not comparable: other K)."""
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.service.observations import ServerComparison, list_observations, observe

    outcome = demo_replay(db_url, 1)
    demo_replay(db_url, 4)
    result = observe(
        db_url,
        "sglang",
        [str(EXAMPLES / "sglang_0.4.6.post5.log")],
        str(DEMO_DRAFTS / "final"),
        str(DEMO_TARGET),
    )
    assert result.accept_length == pytest.approx(1.9) and result.num_steps == 1
    assert result.replay.runs == 1 and result.replay.run_ids == [outcome.run_id]
    assert result.replay.accept_length == pytest.approx(outcome.metrics.mean_accept_length)
    codes = [f.code for f in result.lint]
    assert (
        "engine-rewrote-flags" in codes
        and "single-draft-step" in codes
        and "eagle-algorithm-eagle3-draft" in codes
    )
    ratio = 1.9 / outcome.metrics.mean_accept_length
    assert ("suspect" in result.verdict) == (ratio < 0.85) and f"{1.9:.2f}" in result.verdict
    stored = list_observations(db_url)
    assert stored[0]["id"] == result.observation_id and stored[0]["accept_length"] == pytest.approx(1.9)
    assert stored[0]["lint"] == [f.to_dict() for f in result.lint]
    # the JSON `observe --json` prints reads back as the same result
    assert ServerComparison.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_a_server_far_below_the_replay_points_at_the_serving_side(db_url):
    from backend.defaults import DEMO_DRAFTS
    from backend.service.observations import observe_texts

    outcome = demo_replay(db_url, 3)
    scrape = (
        'vllm:spec_decode_num_drafts_total{engine="0"} 100.0\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 300.0\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 20.0\n'
    )
    result = observe_texts(db_url, "vllm", [(scrape, "scrape")], str(DEMO_DRAFTS / "final"))
    assert result.num_steps == 3 and result.accept_length == pytest.approx(1.2)
    assert result.replay.accept_length == pytest.approx(outcome.metrics.mean_accept_length)
    assert "the serving side is the suspect" in result.verdict


class FakeSGLang(BaseHTTPRequestHandler):
    """Answers POST /generate like SGLang's native endpoint: text and meta_info with the verify count."""

    def do_POST(self):  # http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        tokens = body["sampling_params"]["max_new_tokens"]
        answer = {
            "text": "x",
            "meta_info": {
                "completion_tokens": tokens,
                "spec_verify_ct": tokens * 3 // 4,  # accept length 4/3 at 32 tokens: far below the replay's
                "prompt_tokens": len(body["input_ids"]),
            },
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args):
        pass


def test_serve_check_puts_each_samples_server_accept_length_beside_its_replay(db_url):
    from backend.data.samples import read_jsonl
    from backend.defaults import DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET
    from backend.run.request import ReplayRequest
    from backend.service.observations import ServeCheckSettings, serve_check

    server = HTTPServer(("127.0.0.1", 0), FakeSGLang)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        samples = read_jsonl(DEMO_EVAL)[0][:2]
        url = f"http://127.0.0.1:{server.server_port}"
        settings = ServeCheckSettings(
            ReplayRequest(
                str(DEMO_TARGET), str(DEMO_DRAFTS / "final"), prompt_ids=(1,), num_steps=4, max_new_tokens=32
            )
        )
        result = serve_check(db_url, url, samples, settings)
    finally:
        server.shutdown()
    assert [r["server_accept_length"] for r in result["rows"]] == pytest.approx([4 / 3, 4 / 3])
    assert result["server_mean_accept_length"] == pytest.approx(4 / 3)
    replays = [r["replay_accept_length"] for r in result["rows"]]
    assert (
        result["replay_mean_accept_length"] == pytest.approx(sum(replays) / 2) and min(replays) > 4 / 3 / 0.85
    )
    assert "the serving side is the suspect" in result["verdict"]


def test_unreachable_server_and_garbage_are_bad_input(db_url, tmp_path):
    from backend import BadInput
    from backend.data.samples import read_jsonl
    from backend.defaults import DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET
    from backend.run.request import ReplayRequest
    from backend.service.observations import ServeCheckSettings, observe, serve_check

    with pytest.raises(BadInput, match="the request failed"):
        serve_check(
            db_url,
            "http://127.0.0.1:9",
            read_jsonl(DEMO_EVAL)[0][:1],
            ServeCheckSettings(
                ReplayRequest(
                    str(DEMO_TARGET),
                    str(DEMO_DRAFTS / "final"),
                    prompt_ids=(1,),
                    num_steps=4,
                    max_new_tokens=8,
                )
            ),
        )
    garbage = tmp_path / "server.log"
    garbage.write_bytes(b"\x00\xff not a log")
    with pytest.raises(BadInput, match="not UTF-8"):
        observe(db_url, "sglang", [str(garbage)])
    with pytest.raises(BadInput, match="no such file"):
        observe(db_url, "vllm", [str(tmp_path / "missing.txt")])


def test_a_tree_server_is_compared_with_tree_replays_of_its_shape(db_url):
    """A server running topk 4 (steps 3, draft tokens 8) is put beside the replays of that tree only,
    not beside chains at the same K."""
    from backend.defaults import DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET
    from backend.run.request import ReplayRequest
    from backend.service.jobs import run_replay
    from backend.service.observations import observe_texts

    record = json.loads(DEMO_EVAL.read_text().splitlines()[0])
    prompt = tuple(record["input_ids"][: record["n_prompt_tokens"]])
    chain = demo_replay(db_url, 3)
    tree = run_replay(
        ReplayRequest(
            str(DEMO_TARGET),
            str(DEMO_DRAFTS / "final"),
            num_steps=3,
            topk=4,
            num_draft_tokens=8,
            max_new_tokens=48,
            prompt_ids=prompt,
            record=False,
        ),
        db_url,
    )
    log = (EXAMPLES / "sglang_0.4.6.post5.log").read_text()
    log = log.replace("speculative_num_steps=1", "speculative_num_steps=3")
    log = log.replace("speculative_eagle_topk=1", "speculative_eagle_topk=4")
    log = log.replace("speculative_num_draft_tokens=2", "speculative_num_draft_tokens=8")
    result = observe_texts(db_url, "sglang", [(log, "tree.log")], str(DEMO_DRAFTS / "final"))
    assert result.replay.topk == 4 and result.replay.run_ids == [tree.run_id]
    assert chain.run_id not in result.replay.run_ids
    assert result.replay.accept_length == pytest.approx(tree.metrics.mean_accept_length)


class ListAnswer(BaseHTTPRequestHandler):
    """A server that is not SGLang's /generate: it answers a JSON array of numbers."""

    def do_POST(self):  # http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        data = b"[1, 2, 3]"
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args):
        pass


def test_a_bad_url_or_an_answer_that_is_not_sglangs_is_bad_input():
    from backend import BadInput
    from backend.service.observations import check_server_url, request_accept_length

    for url, reason in (("garbage", "expected http://HOST:PORT"), ("http://[::1", "not a URL")):
        with pytest.raises(BadInput, match=reason):
            check_server_url(url)
    server = HTTPServer(("127.0.0.1", 0), ListAnswer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(BadInput, match="not a JSON object"):
            request_accept_length(f"http://127.0.0.1:{server.server_port}", [1, 2], 4)
    finally:
        server.shutdown()


def test_serve_check_stops_at_the_first_request_the_server_leaves_unanswered():
    """A server that accepts the connection and never answers costs one --timeout, not one per sample."""
    import socket
    import time

    from backend import BadInput
    from backend.service.observations import request_accept_length

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    started = time.monotonic()
    try:
        with pytest.raises(BadInput, match="no answer to /generate within 0.5 s"):
            request_accept_length(f"http://127.0.0.1:{port}", [1, 2], 4, timeout=0.5)
    finally:
        listener.close()
    assert time.monotonic() - started < 60  # ended by the timeout (the server never answers): any machine


def test_agreement_says_what_it_means_for_the_verdict():
    """Issue 31 item 5: 'agree' beside a Broken verdict read as 'all is well'. Agreement says the server
    runs the draft as the replay does, so the cause lies in what both run, and points at the verdict."""
    from backend.service.observations import verdict

    said = verdict(1.25, 1.27)
    assert "agree" in said and "not a serving fault" in said and "verdict" in said
    assert "agree" not in verdict(1.0, 2.0)
