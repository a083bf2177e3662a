"""Diagnostics page, server tab: per-request files of each engine format are read by path, the pooled
accept length is the truth's, the table lists every request, garbage is a message, and the worst
requests are one click from a replay of their prompts."""

from __future__ import annotations

import math

import pytest

from tests.support import per_request_payloads as P
from tests.support.pages import finish, frame_with, ok, page

pytestmark = pytest.mark.slow

N2 = [[1, 2], [0]]
FILES = {
    "vllm.jsonl": (P.vllm, P.REQUESTS),
    "sglang.jsonl": (lambda: P.sglang(old_names_for=()), P.REQUESTS + N2),
    "sglext.jsonl": (P.sglext, P.REQUESTS + N2),
    "trtllm.jsonl": (P.trtllm, P.REQUESTS),
    "llamacpp.jsonl": (P.llamacpp, P.REQUESTS),
    "speculation_profile.json": (P.modelopt, P.REQUESTS),
}


def read(app, path, k=3):
    app.text_input(key="server_requests_location").set_value(str(path))
    app.number_input(key="server_requests_k").set_value(k)
    return ok(app.button(key="server_requests_read").click().run())


def test_every_format_through_the_page(db, tmp_path):
    app = ok(page("4_Diagnostics").run())
    for name, (write, requests) in FILES.items():
        path = tmp_path / name
        path.write_text(write())
        read(app, path)
        shown = {m.label: m.value for m in app.metric}
        truth = P.truth(requests)
        assert float(shown["Served accept length (pooled)"]) == pytest.approx(
            truth["pooled_accept_length"], abs=0.01
        )
        assert not app.error, name
        if name != "speculation_profile.json":
            table = frame_with(app, "served AL")
            served = sorted(x for x in table["served AL"] if x is not None and not math.isnan(x))
            expected = sorted(x for x in P.truth(requests)["accept_length"] if x is not None)
            assert served == pytest.approx(expected, abs=0.01), name
    reads = tmp_path / "server_info.jsonl"
    reads.write_text(P.server_info_reads(P.REQUESTS[:2], P.REQUESTS[3:]))
    read(app, reads)
    assert any("Window between the two reads: accept length 2.22" in i.value for i in app.info)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"metrics": {"speculative_decoding": {"num_spec_steps": -1}}}\n{"x": 1}\n')
    read(app, bad)
    assert "bad.jsonl: line 1:" in app.error[0].value and "num_spec_steps is -1" in app.error[0].value
    read(app, tmp_path / "absent.jsonl")
    assert app.error[0].value == f"{tmp_path / 'absent.jsonl'}: no such file"
    app.text_input(key="server_requests_location").set_value("")
    ok(app.button(key="server_requests_read").click().run())
    assert app.error[0].value.startswith("no file of responses: upload one or give a path or URL")


def test_the_worst_requests_replay_with_one_click(db, tmp_path):
    from backend.data.samples import sample_at
    from backend.defaults import DEMO_EVAL

    prompt = list(sample_at(DEMO_EVAL, 0).prompt_ids)
    path = tmp_path / "served.jsonl"
    path.write_text(
        P.jsonl(
            [
                {
                    "choices": [{"index": 0, "finish_reason": "length", "prompt_token_ids": prompt}],
                    "usage": {"completion_tokens": 12},
                    "metrics": {"speculative_decoding": P.vllm_block([0, 1, 0], 3, detailed=False)},
                }
            ]
        )
    )
    app = read(ok(page("4_Diagnostics").run()), path)
    app.number_input(key="server_requests_n").set_value(1)
    ok(app.button(key="server_requests_replay").click().run())
    ok(finish(app, "server_requests_task"))
    table = frame_with(app, "replay AL")
    assert table["replay run"].notna().all() and 1.0 <= float(table["replay AL"].iloc[0]) <= 4.0
