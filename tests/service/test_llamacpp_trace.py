"""llama.cpp's per-step counts read from its trace (backend/service/llamacpp_server.py), on log lines as
llama-server 11434 writes them with LLAMA_TRACE=1 (copied from a real log), without a server."""

from __future__ import annotations

import pytest

from backend import BadInput
from backend.service.llamacpp_server import served_steps, trace_steps

LINES = """0.01.976.579 I slot   operator(): id  0 | task 0 | accepted  3/ 4 draft tokens
0.02.049.311 I slot   operator(): id  0 | task 0 | accepted  0/ 4 draft tokens
0.02.127.845 I slot print_timings: id  0 | task 0 | draft acceptance = 0.37500 (3 accepted / 8 generated), mean len = 2.50
0.02.199.271 I slot   operator(): id  0 | task 1 | accepted  2/ 3 draft tokens
0.02.270.299 I slot   operator(): id  0 | task 1 | accepted  1/ 1 draft tokens
"""


def exchange(drafted: int, accepted: int, tokens=(5, 6, 7)) -> dict:
    timings = {"draft_n": drafted, "draft_n_accepted": accepted, "predicted_n": len(tokens)}
    return {"request": {}, "response": {"tokens": list(tokens), "timings": timings, "stop_type": "limit"}}


def test_each_trace_line_after_the_offset_is_a_step(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LINES)
    assert [s[:3] for s in trace_steps(log, 0)] == [(0, 3, 4), (0, 0, 4), (1, 2, 3), (1, 1, 1)]
    offset = len(LINES.split("\n")[0]) + 1
    assert [s[:3] for s in trace_steps(log, offset)] == [(0, 0, 4), (1, 2, 3), (1, 1, 1)]


def test_the_trace_must_add_up_to_the_answers_timings(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LINES)
    start = LINES.index("0.02.199")
    served = served_steps(exchange(4, 3), log, start, 1)
    assert served["per_step"] == [2, 1] and served["drafted_per_step"] == [3, 1]
    assert served["accept_length"] == 1 + 3 / 2 and served["verify_steps"] == 2
    with pytest.raises(BadInput, match=r"2 verify steps with 3/4 accepted/drafted, its answer says 5/4"):
        served_steps(exchange(4, 5), log, start, 1, wait=0.1)
    no_draft = {"response": {"tokens": [1, 2, 3], "timings": {"predicted_n": 3}}}
    with pytest.raises(BadInput, match="3 tokens and no draft in its timings"):
        served_steps(no_draft, log, start, 1)
    # two tokens: the first, then a plain decode; llama.cpp writes no draft_n and logs no step
    two = {"response": {"tokens": [1, 2], "timings": {"predicted_n": 2}}}
    assert served_steps(two, log, len(LINES), 1)["per_step"] == []


def test_a_restored_checkpoint_is_not_read_as_a_chain(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("x | task 3 | accepted  1/ 4 draft tokens (restore checkpoint)\n")
    with pytest.raises(BadInput, match="restored checkpoints"):
        served_steps(exchange(4, 1), log, 0, 0, wait=0.1)
