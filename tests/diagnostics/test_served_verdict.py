"""A diagnosis that starts from the user's engine (issue 65 row 19): the server's accept length beside the
replay's under the wiring the engine reads and under the one the probe found, and which it sits with."""

from __future__ import annotations

import json

import pytest


def served(al: float, k: int | None = 4):
    from backend.data.served_acceptance import ServedAcceptance

    return ServedAcceptance("sglang", "server.log", al, k, "mean accept len", "16 decode-batch lines")


@pytest.mark.parametrize(
    ("al", "k", "found", "expected"),
    [
        (1.19, 4, ([0, 2, 6], 2.35), ("aux-wiring", "fail", "the server runs the misread wiring")),
        (2.30, 4, ([0, 2, 6], 2.35), ("served-numbers", "info", "already feeds the trained layers")),
        (0.90, 4, ([0, 2, 6], 2.35), ("served-numbers", "fail", "the cause is on the serving side")),
        (1.50, 4, None, ("served-numbers", "fail", "the cause is on the serving side")),
        (2.05, 4, None, ("served-numbers", "info", "equals the replay's 2.10 under HF [2, 6, 9]")),
        (1.19, 6, ([0, 2, 6], 2.35), ("served-numbers", "warn", "not comparable")),
    ],
)
def test_the_server_s_number_is_placed_between_the_two_wirings(al, k, found, expected):
    from backend.diagnostics.served_verdict import served_findings

    declared = ([2, 6, 9], 1.15 if found else 2.10)
    (finding,) = served_findings(served(al, k), 4, declared, found)
    cls, severity, words = expected
    assert (finding.cls, finding.severity) == (cls, severity) and words in finding.message, finding.message
    assert finding.evidence["served"]["accept_length"] == al


def test_every_served_file_is_read_or_named_in_one_line(tmp_path):
    from backend import BadInput
    from backend.data.served_acceptance import read_served

    log = read_served(open("demo/data/serving/sglang_seed.log").read(), "seed.log")
    assert log.engine == "sglang" and log.num_steps == 4 and 1.0 < log.accept_length < 1.4
    response = {"timings": {"draft_n": 40, "draft_n_accepted": 20, "predicted_n": 61}, "tokens": [1] * 61}
    llama = read_served(json.dumps(response), "llama.json", 4)
    assert llama.engine == "llamacpp" and llama.accept_length == pytest.approx(
        1 + 20 / (40 / 4)
    )  # steps: drafted / K
    with pytest.raises(BadInput, match=r"^notes.txt: neither per-request responses"):
        read_served("hello", "notes.txt")


def test_diagnose_from_the_server_s_log_names_the_wiring_the_server_runs():
    """The bundled seed log (SGLang serving `miswired`): the verdict says the server's accept length sits
    with the misread wiring, and reads the draft as SGLang does (the user's engine)."""
    from tests.support.cli import cli_json

    result = cli_json(
        "diagnose", "--target", "demo/target", "--draft", "demo/drafts/miswired", "--samples",
        "demo/data/eval.jsonl", "--limit", "8", "--served", "demo/data/serving/sglang_seed.log",
    )  # fmt: skip
    assert result["engine"] == "sglang" and result["checks"]["server's numbers"].startswith("compared with")
    said = [f for f in result["findings"] if "the server's accept length" in f["message"]]
    assert len(said) == 1 and said[0]["class"] == "aux-wiring" and said[0]["severity"] == "fail"
    assert "under HF [0, 2, 6] (the wiring the probe found trained)" in said[0]["message"]
    # row 11: the probe's table shows the verdict's live replays on the wiring they ran, and its headline
    # says where the runner-up scores higher than the best on what is not ranked
    best = result["probe"]["candidates"][0]
    assert (
        best["aux_hf_indices"] == [0, 2, 6]
        and best["live_accept_length"] == result["measured"]["live_accept_length"]
    )
    assert "ranked by training loss, while its acc_0" in result["probe"]["verdict"]
