"""The Decode page's run picker and the chosen run's header: status, summary metrics, how the run
read the draft, and why a run without verify steps has no accept length."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime

import streamlit as st

from backend import BadInput
from backend.run.metrics import DEFINITIONS, NEAR_TIE
from backend.run.records import StepRecord
from backend.service import tasks
from backend.service.engine_readings import EngineReadings, engine_readings
from backend.service.per_request import same_path
from backend.service.runs import RunInfo
from ui import state
from ui.html import md
from ui.pickers import run_label
from ui.runs import ACCEPT_LENGTH_HELP
from ui.tables import engine_readings as engine_table
from ui.tokens import Pieces

SHORT_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
TARGET_FORWARDS = {  # params.target_forward (backend/target/lean_target.py)
    "lean": "; target forward: SpecLens's lean Llama forward (checked against transformers' when the target loaded: a decode bit for bit, verify chunks within the last places)",
    "transformers": "; target forward: transformers'",
}


def target_forward(name: str | None) -> str:
    """Whose arithmetic answered the target's side of the run, for the header's caption."""
    if name and name.startswith("trace"):  # backend/target/trace.py: the target once per sample
        return f"; target: a {name} (the draft alone ran at each step; docs/traces.md)"
    return TARGET_FORWARDS.get(name, "")


def number(value, digits: int = 2) -> str:
    """A metric, or a dash where it is undefined (no verify step ran)."""
    return "—" if value is None else f"{value:.{digits}f}"


def newest_of_active_pair(runs: list[RunInfo]) -> int:
    """Where the picker opens when no run was chosen: the newest run of the sidebar's draft, else of its
    target, else the newest run (runs come newest first)."""
    for path, field in ((state.draft_path(), "draft_path"), (state.target_path(), "target_path")):
        found = next((r.id for r in runs if same_path(getattr(r, field), path)), None)
        if found is not None:
            return found
    return runs[0].id


def pick_run(runs: list[RunInfo]) -> int:
    """The run select box: the selected run (a replay that just finished is followed); with none chosen
    yet, the newest run of the sidebar's pair."""
    run_ids = [r.id for r in runs]
    selected = state.get_value("run") or newest_of_active_pair(runs)
    if selected not in run_ids:
        selected = run_ids[0]
    labels = {r.id: run_label(r) for r in runs}
    # The browser keeps showing a select box's old text when only the chosen option's label changes
    # (a run that was "running" finishes): the widget's key follows that label, so it is drawn anew.
    run_key = f"decode_run_{zlib.crc32(labels[selected].encode())}"
    shown = state.follow(run_key, selected, run_ids)
    run_id = st.selectbox("Run", run_ids, key=run_key, format_func=labels.get, **shown)
    if run_id != state.get_value("run"):
        state.set_value("run", run_id)
        state.followed(run_key, run_id)
        st.session_state["decode_step"] = 0
    return run_id


def status(run: RunInfo, steps: list[StepRecord]) -> None:
    """What a run that has not finished covers, said before any of its numbers."""
    if run.status == "finished":
        return
    if run.status == "running":
        beat = run.heartbeat_at or run.created_at
        age = (datetime.now(UTC).replace(tzinfo=None) - beat).total_seconds() if beat else None
        owned = tasks.MANAGER.get(st.session_state.get("decode_task")) is not None
        st.warning(
            f"Run {run.id} is **running**: {len(steps)} steps stored when this was read at "
            f"{datetime.now().strftime('%H:%M:%S')}"
            + ("" if age is None else f" (its writer wrote {age:.0f} s before)")
            + ". The numbers below cover those steps only: "
            + (
                "the progress bar above is live, and the whole page is read again when the job ends."
                if owned
                else "the page reads the run again every 2 s until it ends."
            )
        )
    else:
        st.warning(f"Run {run.id} is **{run.status}** with {len(steps)} stored steps.")
    if run.error:
        st.code(run.error)


def summary(run: RunInfo, steps: list[StepRecord]) -> None:
    metrics = run.measured
    resolved = run.resolved
    cells = st.columns(6)
    cells[0].metric("Accept length", number(metrics.mean_accept_length), help=ACCEPT_LENGTH_HELP)
    cells[1].metric(
        "Acceptance rate", number(metrics.acceptance_rate), help=DEFINITIONS.get("acceptance_rate", "")
    )
    cells[2].metric(
        "Verify steps",
        sum(s.is_verify_step for s in steps),
        help="steps that verified drafts; a plain decode (llama.cpp's last token, no draft) is not one",
    )
    cells[3].metric(
        "Tokens",
        len(run.output_ids),
        help="the output: the prefill's first token, then every token the verify steps kept",
    )
    cells[4].metric("Aux HF indices", str(run.aux_hf_indices), help=resolved.wiring_source)
    dtype = resolved.dtype or "?"
    disagreement = metrics.self_disagreement_per_1000
    cells[5].metric(
        "Device · dtype",
        f"{resolved.device or '?'} {SHORT_DTYPES.get(dtype, dtype)}",
        delta=None if disagreement is None else f"target self-disagreement {disagreement:.1f} / 1k",
        delta_color="off",
        help=DEFINITIONS["self_disagreement_per_1000"],
    )
    engine = resolved.engine or "specforge"
    requested = run.request.engine if run.request else "auto"
    st.caption(
        f"Run as **{engine}** reads the draft"
        + (f" (requested: {requested})" if requested not in ("auto", engine) else "")
        + f"; wiring: {resolved.wiring_source}"
        + target_forward(resolved.target_forward)
    )
    expected = metrics.expected_accept_length
    st.markdown(
        f"Decoding: **{resolved.mode}**"
        + (
            f" · expected accept length **{expected:.2f}** beside the realised "
            f"{number(metrics.mean_accept_length)}"
            if expected is not None and resolved.sampling_rule
            else ""
        ),
        help=DEFINITIONS["expected_accept_length"],
    )
    for note in resolved.decoding_notes:
        st.caption(f"Note: {md(note)}")
    if metrics.batch_size:
        st.caption(
            f"Replayed in a batch of {metrics.batch_size} samples (evaluate or Compare): the same tokens and "
            "steps as alone, its hidden states within the last places (a product over more rows rounds "
            "otherwise; where that meets a near-tie, it is named below); its draft and verify times are the "
            "batch forwards' time shared evenly."
        )
    near_ties_note(run)
    cap_note(run, steps)


def near_ties_note(run: RunInfo) -> None:
    """Where the target's top two logits nearly tied at a token the output took (the run's metrics)."""
    ties = run.measured.near_ties
    if not ties:
        return
    shown = ", ".join(f"#{position - len(run.prompt_ids) + 1}" for position in ties[:12])
    st.caption(
        f"Near-ties: {len(ties)} output token(s) ({shown}{', ...' if len(ties) > 12 else ''}, counting the "
        f"prefill's token as #1) were chosen where the target's top two logits lay within {NEAR_TIE:g} of "
        "the row's largest magnitude: a product summed in another order (a batch, transformers' forward, "
        "an engine's kernels) may take the other token there."
    )


def budget(run: RunInfo) -> int:
    """The run's max new tokens (its output's length where its request cannot be read back)."""
    return run.request.max_new_tokens if run.request else len(run.output_ids)


def cap_note(run: RunInfo, steps: list[StepRecord]) -> None:
    """Why tokens / steps is not the accept length: the token cap (or an end token) cut the last step."""
    emitted = sum(s.accepted_count + 1 for s in steps)
    committed = max(0, len(run.output_ids) - 1)  # the first token comes from the prefill
    at_cap = len(run.output_ids) >= budget(run)
    if steps and emitted == committed and at_cap:  # stopped at the cap, on a step boundary
        st.caption(f"The output stopped at the token cap: max new tokens {budget(run)}.")
    elif steps and emitted != committed:
        # one count on screen, Tokens; the accept length's own count said in its terms
        st.caption(
            f"Accept length = {emitted} tokens the {len(steps)} verify steps emitted (a + 1 each) / {len(steps)} = "
            f"{emitted / len(steps):.2f}. Tokens ({len(run.output_ids)}) is the prefill's first token and "
            f"{committed} of those {emitted}: the last step's {emitted - committed} past "
            + ("the token cap" if at_cap else "the end token")
            + " were not kept."
        )


def readings_of(draft_path: str, target_path: str) -> EngineReadings | None:
    try:
        return engine_readings(draft_path, target_path)  # cached by the files it read
    except BadInput:
        return None


def readings(run: RunInfo) -> None:
    with st.expander("How engines read this draft (wiring, feedback, embedding): where they disagree"):
        views = readings_of(run.draft_path, run.target_path)
        if views is None:
            st.info("The draft or target directory can no longer be read.")
        else:
            engine_table(views, key="decode_engines")


def no_steps(run: RunInfo) -> None:
    """Why a finished run has no verify step, and what to change."""
    if run.status != "finished":
        return
    limit = budget(run)
    if len(run.output_ids) >= limit:
        st.info(
            f"No verify step ran: the output is {len(run.output_ids)} token(s), the target's own first "
            f"token from the prefill, and then the run's limit of {limit} new token(s) was reached. There "
            "is no draft to judge, so accept length is undefined (—). Raise Max new tokens."
        )
        return
    last = run.output_ids[-1] if run.output_ids else None
    shown = "" if last is None else f" {md(repr(Pieces(run.target_path)(last)))} (id {last})"
    st.info(
        f"No verify step ran: the target ended at once. Its first token from the prefill was its "
        f"end-of-sequence token{shown}, so there is no draft to judge and accept length is undefined (—). "
        "A chat model given a raw prompt often ends like this: tick **Apply the target's chat template** "
        "for a typed prompt, or pick a dataset sample rendered with the template."
    )
