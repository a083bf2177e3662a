"""ignore_eos, a setting added end to end: the request declares it, the plan uses it, and the CLI
flag, the Decode widget, the stored run and reuse follow from its field."""

from __future__ import annotations

import pytest

from backend import BadInput
from backend.run.request import ReplayRequest


def greedy_past_eos(target, prompt: list[int], new_tokens: int) -> list[int]:
    """The target's argmax, one full forward a token, never stopping at its EOS."""
    import torch  # imported when the test runs, not when the tests are collected

    tokens = list(prompt)
    for _ in range(new_tokens):
        with torch.inference_mode():
            logits = target.model(input_ids=torch.tensor([tokens])).logits
        tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(prompt) :]


def test_a_replay_that_ignores_eos_runs_to_its_budget_and_equals_plain_greedy(pairs, db_url):
    from backend.service.jobs import run_replay
    from backend.service.runs import find_finished_run, get_run

    pair = pairs["random-L2"]  # eos id 7
    eos = set(pair.target.eos_token_ids)
    prompt = next(
        p for p in ([1, 2], [3, 4, 5], [6], [9, 8], [10, 11, 12], [2, 9]) if eos & set(greedy_past_eos(pair.target, p, 24))
    )  # fmt: skip
    plain = greedy_past_eos(pair.target, prompt, 24)
    stops = dict(target=str(pair.target_dir), draft=str(pair.draft_dir), prompt_ids=tuple(prompt))
    stopped = run_replay(ReplayRequest(**stops, num_steps=3, max_new_tokens=24), db_url)
    first_eos = next(i for i, t in enumerate(plain) if t in eos)
    assert stopped.output_ids == plain[: first_eos + 1]  # without it: the end token ends the run
    request = ReplayRequest(**stops, num_steps=3, max_new_tokens=24, ignore_eos=True)
    ignored = run_replay(request, db_url)
    assert ignored.output_ids == plain and len(ignored.output_ids) == 24  # past the EOS, as the target
    stored = get_run(db_url, ignored.run_id)
    assert stored.request.ignore_eos and stored.params["ignore_eos"] is True
    assert find_finished_run(db_url, request).id == ignored.run_id  # each answers its own request
    assert (
        find_finished_run(db_url, ReplayRequest(**stops, num_steps=3, max_new_tokens=24)).id == stopped.run_id
    )


def test_llamacpp_refuses_it_and_the_flag_and_the_widget_exist():
    with pytest.raises(BadInput, match="logit_bias_eog"):
        ReplayRequest("t", "d", prompt_ids=(1,), engine="llamacpp", ignore_eos=True)
    from backend.cli.parsers import build_parser

    args = build_parser().parse_args(["replay", "--prompt", "x", "--ignore-eos"])
    from backend.cli.flags import request_fields

    assert request_fields(args)["ignore_eos"] is True
    from backend.run.request import settings_of

    widget = next(m.widget for n, m, _ in settings_of() if n == "ignore_eos")
    assert (widget.kind, widget.label) == ("checkbox", "Ignore EOS")
