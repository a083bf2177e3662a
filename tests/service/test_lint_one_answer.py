"""Issue 58 row 3: the lint gives one answer for the same draft, command and database, on the page
(service.serving_lint.lint) and on the CLI; a K read off a run names the run and warns when that run was
fed a wiring the probe rejects."""

from __future__ import annotations

import json

from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
from tests.support.cli import run_cli as cli

DRAFT = str(DEMO_DRAFTS / "final")
SGLANG = (  # the seed story's flags: num_steps 1 with 16 draft tokens, rewritten to a chain of K
    f"python -m sglang.launch_server --model-path {DEMO_TARGET} --speculative-algorithm EAGLE3 "
    f"--speculative-draft-model-path {DRAFT} --speculative-num-steps 1 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 16"
)


def _chain_run(db_url: str, fed: list[int]) -> int:
    """A finished greedy chain run of the draft, K = 4, as a replay stores it."""
    from backend.run.request import ReplayRequest
    from backend.run.run_value import Resolved, params
    from db import store

    request = ReplayRequest(str(DEMO_TARGET), DRAFT, prompt_ids=(1, 2, 3), num_steps=4)
    factory = store.session_factory(store.make_engine(db_url))
    with store.session_scope(factory) as session:
        run_id = store.create_run(
            session, kind="replay", target_path=str(DEMO_TARGET), draft_path=DRAFT,
            params=params(request, Resolved(num_steps=4, device="cpu", dtype="float32")),
            aux_hf_indices=fed, given=store.RunInput([1, 2, 3]),
        )  # fmt: skip
        store.finish_run(
            session, run_id, output_ids=[5] * 40,
            metrics={"accept_histogram": [2, 3, 4, 6, 5], "draft_ms_total": 40.0, "verify_ms_total": 400.0},
        )  # fmt: skip
    return run_id


def test_a_k_read_off_a_run_of_a_rejected_wiring_says_so(db_url):
    from backend.service.serving_lint import whatif_best_k

    run_id = _chain_run(db_url, [2, 4, 5])
    k, why = whatif_best_k(db_url, DRAFT)
    assert f"run #{run_id}" in why and "warning" not in why
    k_again, warned = whatif_best_k(db_url, DRAFT, [[0, 1, 2]])  # the probe found another wiring
    assert k_again == k and f"warning: run #{run_id} fed HF [2, 4, 5], a wiring the probe rejects" in warned
    trained_run = _chain_run(db_url, [0, 1, 2])
    assert f"run #{trained_run}" in whatif_best_k(db_url, DRAFT, [[0, 1, 2]])[1]  # a trained-wiring run first


def test_the_cli_and_the_page_lint_alike_on_one_database(db_url):
    from backend.service.serving_lint import lint

    _chain_run(db_url, [2, 4, 5])
    page = lint(DRAFT, SGLANG, "SGLang", str(DEMO_TARGET), db_url)
    result = cli(
        "lint", "--sglang", SGLANG, "--draft", DRAFT, "--target", str(DEMO_TARGET), "--db", db_url, "--json"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(json.dumps(page.to_dict()))
    assert "run #" in json.dumps(page.to_dict())  # the K came from the stored run, on both
