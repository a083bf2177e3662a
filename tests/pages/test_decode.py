"""Decode page: a replay of the demo pair in the background, stepping through it; a bad wiring
override and a refused draft are shown as errors."""

from __future__ import annotations

import json

import pytest

from tests.support.pages import REPO, finish, ok, page

pytestmark = pytest.mark.slow


def test_decode_runs_in_the_background_and_steps(db):
    from backend.service.runs import get_run_with_steps

    app = ok(page("2_Decode").run())
    # issue 43 row 8: the picked sample is previewed: the prompt's last lines, before anything runs
    from backend.defaults import DEMO_TARGET
    from backend.service.datasets import get_samples
    from ui.pickers import prompt_tail

    first = get_samples(db, app.selectbox(key="decode_dataset").value)[0]
    assert any(c.value == prompt_tail(first.prompt_ids, str(DEMO_TARGET)) for c in app.code)
    assert any("prompt tokens" in c.value and "the prompt ends" in c.value for c in app.caption)
    app.number_input(key="decode_max_new_tokens").set_value(32).run()
    app.button(key="decode_start").click().run()
    app = ok(finish(app, "decode_task"))
    app.run()
    assert float(app.metric[0].value) >= 1.0 and app.session_state["decode_step"] == 0
    assert any("target forward: SpecLens's lean Llama forward" in c.value for c in app.caption)
    # the step viewer opens on a comparison computed with the replay, not on norms (issue 31 item 8),
    # and one that tells healthy from broken (issue 43 row 5): here the wiring vLLM 0.32's V1 runner
    # would feed this SpecForge draft, one layer low
    from backend.service import reference_spec

    run_id = app.session_state["global_run_id"]
    run, _ = get_run_with_steps(db, run_id)
    expected = reference_spec.default_reference(run.target_path, run.draft_path)
    assert expected.kind == "wiring" and "vllm" in expected.why
    assert app.selectbox(key="decode_reference").value == expected.label
    (rows,) = app.table
    assert list(rows.value.columns[:2]) == ["position", "chunk"]  # every row says its position
    ok(app.button(key="decode_next").click().run())
    assert app.session_state["decode_step"] == 1
    ok(app.button(key="decode_prev").click().run())
    assert app.session_state["decode_step"] == 0
    run_id = app.session_state["global_run_id"]
    run, steps = get_run_with_steps(db, run_id)
    # issue 43 row 10: when the cap cut the last step, the page says why tokens / steps differs
    emitted = sum(s.accepted_count + 1 for s in steps)
    noted = [c.value for c in app.caption if c.value.startswith("Accept length = ")]
    assert bool(noted) == (emitted != len(run.output_ids) - 1), noted
    if noted:
        assert (
            f"{emitted} tokens the {len(steps)} verify steps emitted" in noted[0] and "token cap" in noted[0]
        )
    rejecting = [i for i, s in enumerate(steps) if s.accepted_count < len(s.drafted_ids) and i > 0]
    button = app.button(key="decode_next_rejection")
    assert button.label == (
        f"Next rejection: step {rejecting[0] + 1} »" if rejecting else "No later rejection"
    )
    ok(button.click().run())
    assert app.session_state["decode_step"] == (rejecting[0] if rejecting else 0)


def test_decode_bad_override_and_refused_draft(db, tmp_path):
    from backend.service.tasks import MANAGER

    app = ok(page("2_Decode").run())
    app.text_input(key="decode_aux_hf_indices").set_value("1,2").run()
    ok(app.button(key="decode_start").click().run())
    assert "exactly three target states; got 2 indices" in app.error[0].value
    # issue 58 row 5: a number out of range reaches the request's check and blocks Start in one line
    app.text_input(key="decode_aux_hf_indices").set_value("").run()
    app.number_input(key="decode_max_new_tokens").set_value(100_000_000).run()
    ok(app.button(key="decode_start").click().run())
    assert "max new tokens" in app.error[0].value and "32768" in app.error[0].value
    assert "decode_task" not in app.session_state
    app.number_input(key="decode_max_new_tokens").set_value(32).run()
    broken = tmp_path / "broken"
    broken.mkdir()
    config = json.loads((REPO / "demo/drafts/final/config.json").read_text())
    (broken / "config.json").write_text(json.dumps(config))
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    app.session_state["global_drafts"] = [*app.session_state["global_drafts"], str(broken)]
    app.run()
    app.selectbox(key="decode_draft").set_value("broken")
    app.text_input(key="decode_aux_hf_indices").set_value("").run()
    app.button(key="decode_start").click().run()
    task = MANAGER.wait(app.session_state["decode_task"], 120)
    assert task.status == "failed"
    app = ok(app.run())
    assert "failed" in app.error[0].value


def test_a_run_without_verify_steps_is_explained_not_shown_as_zero(db):
    """A prompt whose first (prefill) token is already the end: no verify step, accept length
    undefined: a dash and a sentence, never 0.00 beside 'Verify steps 0'."""
    from backend.service.runs import get_run_with_steps

    app = ok(page("2_Decode").run())
    app.radio(key="decode_mode").set_value("Typed prompt").run()
    app.number_input(key="decode_max_new_tokens").set_value(1).run()
    app.button(key="decode_start").click().run()
    app = ok(finish(app, "decode_task"))
    run, steps = get_run_with_steps(db, app.session_state["global_run_id"])
    assert steps == [] and len(run.output_ids) == 1
    assert app.metric[0].value == "—" and app.metric[2].value == "0"
    assert "No verify step ran" in app.info[0].value and "accept length is undefined" in app.info[0].value
    assert "limit of 1 new token(s) was reached" in app.info[0].value


def test_a_typed_prompt_goes_behind_the_targets_chat_template_unless_unticked(db):
    """A chat target's typed prompt is sent as a chat server sends it (one user message, the
    assistant's header after it); unticking the box sends the text raw."""
    from backend.data.conversations import user_prompt_ids
    from backend.engine.loading import load_tokenizer
    from backend.service.runs import get_run_with_steps

    app = ok(page("2_Decode").run())
    app.radio(key="decode_mode").set_value("Typed prompt").run()
    assert app.checkbox(key="decode_chat_template").value is True  # the demo target has a template
    typed = app.text_area(key="decode_prompt").value
    tokenizer = load_tokenizer(app.session_state["global_target"])
    prompts = []
    for templated in (True, False):
        app.checkbox(key="decode_chat_template").set_value(templated).run()
        app.number_input(key="decode_max_new_tokens").set_value(1).run()
        app.button(key="decode_start").click().run()
        app = ok(finish(app, "decode_task"))
        run, _ = get_run_with_steps(db, app.session_state["global_run_id"])
        prompts.append(list(run.prompt_ids))
    assert prompts[0] == user_prompt_ids(tokenizer, typed)
    assert prompts[1] == tokenizer(typed)["input_ids"] and prompts[0] != prompts[1]


def test_a_run_started_elsewhere_opens_on_the_healthy_vs_broken_comparison(db):
    """Issue 58 row 9: a run from the CLI (or Compare) opened on 'fed features only (norms)'; only
    Decode's own form asked for the reference that tells healthy from broken."""
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.run.request import ReplayRequest
    from backend.service import reference_spec
    from backend.service.batch_jobs import run_in_batches
    from backend.service.datasets import ensure_demo_dataset, get_samples

    samples = get_samples(db, ensure_demo_dataset(db))[:2]
    requests = [
        ReplayRequest(
            str(DEMO_TARGET), str(DEMO_DRAFTS / "final"), prompt_ids=tuple(s.prompt_ids), max_new_tokens=16
        )
        for s in samples
    ]
    run_id = run_in_batches(requests, db)[
        -1
    ].run_id  # as evaluate stores it (issue 56): batched, no reference
    from db import store
    from db.models import Run

    factory = store.session_factory(store.make_engine(db))
    with store.session_scope(factory) as session:  # a near-tie at the output's 3rd token, as recorded
        run = session.get(Run, run_id)
        assert run.metrics["near_ties"] == []  # none on the toy pair
        prompt_length = len(run.prompt_ids)
        run.metrics = {**run.metrics, "near_ties": [prompt_length + 2]}
    app = ok(page("2_Decode").run())
    assert app.session_state["global_run_id"] == run_id
    assert any("Replayed in a batch of 2 samples" in c.value for c in app.caption)  # said, never hidden
    assert any(c.value.startswith("Near-ties: 1 output token(s) (#3,") for c in app.caption)
    app = ok(finish(app, "decode_reference_task"))
    expected = reference_spec.default_reference(str(DEMO_TARGET), str(DEMO_DRAFTS / "final"))
    assert app.selectbox(key="decode_reference").value == expected.label
    assert run_id in app.session_state["decode_auto_references"]


def test_the_form_s_draft_follows_the_sidebar_until_picked_in_the_form(db):
    """Issue 58 row 7: "Draft to replay" follows the sidebar's draft while the form is open, and keeps
    a draft picked in the form until the sidebar changes."""
    app = ok(page("2_Decode").run())
    sidebar, form = app.sidebar.selectbox(key="sidebar_draft"), app.selectbox(key="decode_draft")
    first = sidebar.value
    assert form.value == first
    other = next(name for name in sidebar.options if name != first)
    app = ok(sidebar.set_value(other).run())
    assert app.selectbox(key="decode_draft").value == other  # followed the sidebar
    third = next(n for n in app.selectbox(key="decode_draft").options if n not in (other, first))
    app = ok(app.selectbox(key="decode_draft").set_value(third).run())
    app = ok(app.run())
    assert app.selectbox(key="decode_draft").value == third  # picked in the form: kept
    assert app.sidebar.selectbox(key="sidebar_draft").value == other
    app = ok(app.sidebar.selectbox(key="sidebar_draft").set_value(first).run())
    assert app.selectbox(key="decode_draft").value == first  # the sidebar moved: the form follows again
