"""A sampled engine held along its own output (backend/target/forced_trace.py, engine_check.forced_steps):
given the tokens a sampled chain emitted, the drafts (greedy, as every engine drafts) and the accepted
counts follow. The replay's own sampled runs stand for the engine here (its acceptance rules emit a
rejected draft never, as vLLM's and llama.cpp's do); the engines themselves: tests/real_engine."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("kind", ["eagle3", "dflash"])
def test_a_sampled_replay_is_reproduced_step_for_step_along_its_output(pairs, tmp_path, kind):
    from dataclasses import replace

    from backend.run.records import verify_counts
    from backend.run.request import ReplayRequest
    from backend.service.engine_check import EngineCheckSettings, forced_steps
    from backend.service.jobs import run_replay

    if kind == "eagle3":
        pair = pairs["copy-L5-context"]
        target, draft = str(pair.target_dir), str(pair.draft_dir)
    else:  # the bundled DFlash draft: a random toy one accepts nothing once the target samples
        target, draft = "demo/smollm2/target", "demo/smollm2/drafts/dflash"
    db_url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    checked, accepted = 0, set()
    for seed in (1, 2, 3):  # the replay samples under vLLM's rule (llama.cpp's sampled verify: not replayed)
        asked = ReplayRequest(
            target, draft, prompt_ids=(5, 9, 2, 7), num_steps=4, max_new_tokens=24, temperature=0.7,
            seed=seed, engine="vllm",
        )  # fmt: skip
        sampled = run_replay(asked, db_url)
        settings = EngineCheckSettings(asked)
        assert settings.sampling == {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "seed": seed}
        forced = forced_steps(db_url, asked.prompt_ids, sampled.output_ids, settings, "forced")
        assert forced["output_ids"] == sampled.output_ids
        assert forced["per_step"] == verify_counts(sampled.steps)
        checked += len(forced["per_step"])
        accepted |= set(forced["per_step"])
    assert checked > 12 and len(accepted) > 1  # rejections and acceptances both seen
    from backend import BadInput

    with pytest.raises(BadInput, match="token ids outside the target's vocabulary"):  # a server's garbage
        forced_steps(db_url, asked.prompt_ids, [3, 10**9], settings, "garbage")
    if kind == "dflash":  # a sampled request to llama.cpp is held the same way (its replay is greedy)
        assert EngineCheckSettings(replace(asked, engine="llamacpp")).sampling["seed"] == 3
    # the lint's K is read off runs whose step times are a served step's: the forced runs (over a trace:
    # no target forward timed) and the sampled ones (not a greedy chain) give none
    from backend.service.serving_lint import whatif_best_k

    assert whatif_best_k(db_url, draft) is None
    # the forced replay is a plain greedy one where the tokens are the target's greedy output
    greedy = run_replay(replace(asked, temperature=0.0), db_url)
    plain = EngineCheckSettings(replace(asked, temperature=0.0))
    assert plain.sampling is None
    again = forced_steps(db_url, asked.prompt_ids, greedy.output_ids, settings, "forced greedy")
    assert again["per_step"] == verify_counts(greedy.steps)
    # a greedy run replayed alone: an EAGLE-3 chain's rates give a K; a DFlash block's change with K
    assert (whatif_best_k(db_url, draft) is None) == (kind == "dflash")


def test_a_sampled_engine_that_rejects_a_draft_it_emits_is_named():
    """Before its last step, a sampled engine counting fewer drafts than match its own output rejected
    a draft it then emitted (the steps before are equal, so the drafts are the replay's): said with the
    prompt and step; a difference at the last step only (past the output) is not that."""
    from backend.service.engine_check_result import PromptCheck, StepDifference
    from backend.service.forced_replay import rejected_yet_emitted

    def row(prompt, served, replay):
        step = next((i for i, (a, b) in enumerate(zip(served, replay, strict=False)) if a != b), None)
        diff = None if step is None else StepDifference(step=step, served=served[step], replay=replay[step])
        return PromptCheck(
            prompt=prompt, served_accept_length=None, replay_accept_length=None, served_steps=len(served),
            replay_steps=len(replay), equal_step_for_step=diff is None, first_difference=diff,
            same_tokens=True, replay_run=None, prompt_ids=[1], served_per_step=served, served_token_ids=[],
            replay_per_step=replay,
        )  # fmt: skip

    equal = row(0, [0, 1, 0], [0, 1, 0])
    last_only = row(1, [0, 1, 0], [0, 1, 2])
    assert rejected_yet_emitted([equal, last_only]) == ""
    said = rejected_yet_emitted([equal, last_only, row(2, [0, 0, 0, 0], [0, 2, 0])])
    assert (
        "on 1 of 3 prompts" in said and "prompt 2, step 1" in said and "(1 drafts accepted where" not in said
    )
    assert (
        "2 drafts accepted where its own output matches 6" in said and "rejects drafts it then emits" in said
    )
