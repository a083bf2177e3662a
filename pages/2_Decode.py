"""Decode: start a replay in the background, then step through it with the hidden-state panel."""

from __future__ import annotations

import time
import zlib
from datetime import UTC, datetime

import pandas as pd
import streamlit as st

from backend import BadInput
from backend.engine.metrics import DEFINITIONS
from backend.engine.records import decoding_mode
from backend.engine.wiring import parse_aux_indices
from backend.service import runs as stored_runs
from backend.service import tasks
from backend.service.checks import engine_readings
from backend.service.requests import ENGINE_CHOICES, ReplayRequest
from ui import charts, state
from ui.charts import chunk_labels
from ui.clickable import clickable_steps
from ui.html import CSS, chips_html, context_html, legend, md, output_html, step_statuses
from ui.pickers import dataset_picker, run_label
from ui.runs import ACCEPT_LENGTH_HELP, get_run, list_runs
from ui.tables import engine_readings as engine_table
from ui.taskview import task_panel
from ui.tokens import Pieces
from ui.tree import tree_figure

st.set_page_config(page_title="SpecLens · Decode", layout="wide")
state.sidebar()
st.title("Decode")

# ----------------------------------------------------------------------------- start a run

with st.expander("Start a replay", expanded=not list_runs(limit=1)):
    mode = st.radio("Prompt from", ["Dataset sample", "Typed prompt"], horizontal=True, key="decode_mode")
    source = None  # the request's prompt fields
    if mode == "Dataset sample":
        preset = st.session_state.get("decode_sample")
        dataset_id, samples = dataset_picker("decode_dataset", preset[0] if preset else None)
        if samples:
            index = st.number_input(
                "Sample #",
                0,
                len(samples) - 1,
                value=preset[1] if preset and preset[0] == dataset_id else 0,
                key="decode_index",
            )
            chosen = samples[int(index)]
            source = {
                "prompt_ids": tuple(chosen.prompt_ids),
                "sample_id": chosen.id,
                "sample_ref": f"dataset {dataset_id} #{int(index)}",
            }
            st.caption(f"{chosen.prompt_len} prompt tokens, source:")
            st.text(chosen.source)
    else:
        typed = st.text_area("Prompt", "def parse_header(line):\n", key="decode_prompt")
        source = {"prompt_text": typed, "sample_ref": "prompt"}
    names = list(state.drafts())
    current = state.draft_name(state.draft_path())
    c1, c0, c2, c3, c4 = st.columns(5)
    draft_choice = c1.selectbox(
        "Draft", names, index=names.index(current) if current in names else 0, key="decode_draft"
    )
    engine = c0.selectbox(
        "Run it as",
        ENGINE_CHOICES,
        key="decode_engine",
        help="Whose reading of the draft to replay: which layers feed it, which variant flags count, whose "
        "embedding it uses. auto = the tool that trained it. See 'How engines read this draft' below a run.",
    )
    steps = c2.number_input("K (draft steps)", 1, 16, 4, key="decode_steps")
    max_new = c3.number_input("Max new tokens", 1, 4096, 96, key="decode_max_new")
    override_text = c4.text_input(
        "Wiring override (HF indices)",
        "",
        key="decode_override",
        help="Three HF hidden_states indices, e.g. 0,2,4 (0 = embedding output). "
        "Empty: the draft's declared wiring.",
    )
    st.caption(
        "Tree and sampling, as SGLang's flags: topk > 1 drafts a tree of N verified tokens "
        "(--speculative-eagle-topk, --speculative-num-draft-tokens; N = 0 means K + 1, a chain); "
        "temperature 0 is greedy. docs/reference.md §12."
    )
    t1, t2, t3, t4, t5, t6 = st.columns(6)
    topk = t1.number_input("topk", 1, 16, 1, key="decode_topk")
    draft_tokens = t2.number_input("Draft tokens N", 0, 256, 0, key="decode_draft_tokens")
    temperature = t3.number_input("Temperature", 0.0, 10.0, 0.0, step=0.1, key="decode_temperature")
    top_p = t4.number_input("top_p", 0.01, 1.0, 1.0, step=0.05, key="decode_top_p")
    top_k = t5.number_input("top_k (0 = all)", 0, 1_000_000, 0, key="decode_top_k")
    seed = t6.number_input("Seed", 0, 2**31 - 1, 0, key="decode_seed")
    if st.button("Start", type="primary", key="decode_start"):
        try:
            if source is None:
                raise BadInput("choose a sample or type a prompt")
            request = ReplayRequest(
                state.target_path(),
                state.drafts()[draft_choice],
                num_steps=int(steps),
                max_new_tokens=int(max_new),
                aux_hf_indices=parse_aux_indices(override_text),
                engine=engine,
                topk=int(topk),
                num_draft_tokens=int(draft_tokens) or None,
                temperature=float(temperature),
                top_p=float(top_p),
                top_k=int(top_k),
                seed=int(seed),
                **source,
            )
        except BadInput as error:
            st.error(str(error))
        else:
            st.session_state["decode_task"] = tasks.start_replay(state.db(), request)


def pick_up_run(result: dict) -> None:
    state.set_value("run", result["run_id"])
    st.session_state["decode_step"] = 0


task_panel("decode_task", on_finish=pick_up_run, failure="The replay failed: ", adopt="replay")

# ----------------------------------------------------------------------------- choose a run

runs = list_runs(limit=200)
if not runs:
    running = [t for t in tasks.MANAGER.list("replay") if t.active]
    st.info(
        "A replay is running: its run opens here when it ends (progress above)."
        if running
        else "No run yet: start one above."
    )
    st.stop()
run_ids = [r.id for r in runs]
selected = state.get_value("run") or run_ids[0]
if selected not in run_ids:
    selected = run_ids[0]
labels = {r.id: run_label(r) for r in runs}
# The browser keeps showing a select box's old text when only the chosen option's label changes
# (a run that was "running" finishes): the widget's key follows that label, so it is drawn anew.
run_key = f"decode_run_{zlib.crc32(labels[selected].encode())}"
state.follow(run_key, selected, run_ids)  # a replay that just finished is shown, not the old run
run_id = st.selectbox("Run", run_ids, index=run_ids.index(selected), key=run_key, format_func=labels.get)
if run_id != state.get_value("run"):
    state.set_value("run", run_id)
    state.followed(run_key, run_id)
    st.session_state["decode_step"] = 0
run, steps = get_run(run_id)
if run is None:
    st.error(f"Run {run_id} is gone (deleted?).")
    st.stop()
if run.status != "finished":
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
pieces = Pieces(run.target_path)
metrics = run.metrics or {}
summary = st.columns(6)


def number(value, digits: int = 2) -> str:
    """A metric, or a dash where it is undefined (no verify step ran)."""
    return "—" if value is None else f"{value:.{digits}f}"


summary[0].metric("Accept length", number(metrics.get("mean_accept_length")), help=ACCEPT_LENGTH_HELP)
summary[1].metric(
    "Acceptance rate", number(metrics.get("acceptance_rate")), help=DEFINITIONS.get("acceptance_rate", "")
)
summary[2].metric("Verify steps", len(steps))
summary[3].metric("Tokens", len(run.output_ids))
summary[4].metric("Aux HF indices", str(run.aux_hf_indices), help=run.params.get("wiring_source", ""))
SHORT_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
TARGET_FORWARDS = {  # params.target_forward (backend/engine/lean_target.py)
    "lean": "; target forward: SpecLens's lean Llama forward (checked bit for bit against transformers')",
    "transformers": "; target forward: transformers'",
}
precision = f"{run.params.get('device', '?')} {SHORT_DTYPES.get(run.params.get('dtype'), run.params.get('dtype', '?'))}"
disagreement = metrics.get("self_disagreement_per_1000")
summary[5].metric(
    "Device · dtype",
    precision,
    delta=None if disagreement is None else f"target self-disagreement {disagreement:.1f} / 1k",
    delta_color="off",
    help=DEFINITIONS["self_disagreement_per_1000"],
)
st.caption(
    f"Run as **{run.params.get('engine', 'specforge')}** reads the draft"
    + (
        f" (requested: {run.params['engine_requested']})"
        if run.params.get("engine_requested") not in (None, run.params.get("engine"))
        else ""
    )
    + f"; wiring: {run.params.get('wiring_source', '')}"
    + TARGET_FORWARDS.get(run.params.get("target_forward"), "")
)
expected = metrics.get("expected_accept_length")
st.markdown(
    f"Decoding: **{decoding_mode(run.params)}**"
    + (
        f" · expected accept length **{expected:.2f}** beside the realised "
        f"{number(metrics.get('mean_accept_length'))}"
        if expected is not None and run.params.get("sampling_rule")
        else ""
    ),
    help=DEFINITIONS["expected_accept_length"],
)
for note in run.params.get("decoding_notes") or []:
    st.caption(f"Note: {md(note)}")


@st.cache_data(show_spinner=False, max_entries=8)
def readings_of(draft_path: str, target_path: str) -> dict | None:
    try:
        return engine_readings(draft_path, target_path)
    except BadInput:
        return None


with st.expander("How engines read this draft (wiring, feedback, embedding): where they disagree"):
    readings = readings_of(run.draft_path, run.target_path)
    if readings is None:
        st.info("The draft or target directory can no longer be read.")
    else:
        engine_table(readings, key="decode_engines")
if not steps:
    if run.status == "finished":
        limit = run.params.get("max_new_tokens")
        why = (
            f"the run's limit of {limit} new token(s) was reached"
            if limit is not None and len(run.output_ids) >= limit
            else "the target ended at its end-of-sequence token"
        )
        st.info(
            f"No verify step ran: the output is {len(run.output_ids)} token(s), the target's own first "
            f"token from the prefill, and then {why}. There is no draft to judge, so accept length is "
            "undefined (—). Raise Max new tokens or pick a longer prompt or a dataset sample."
        )
    st.stop()

# ----------------------------------------------------------------------------- step-through viewer


def next_rejection(current: int) -> int | None:
    """The first step after `current` that rejected a draft."""
    return next(
        (i for i in range(current + 1, len(steps)) if steps[i].accepted_count < len(steps[i].drafted_ids)),
        None,
    )


def move(delta: int | None = None, to_rejection: bool = False) -> None:
    current = st.session_state.get("decode_step", 0)
    if to_rejection:
        later = next_rejection(current)
        current = current if later is None else later
    else:
        current = min(max(0, current + delta), len(steps) - 1)
    st.session_state["decode_step"] = current
    st.session_state["decode_slider"] = current + 1


@st.cache_resource(show_spinner=False, max_entries=16)
def token_stats(db_url: str, run_id: int, reference: str | None, version: int, freshness) -> list[dict]:
    """Cached per run state: `freshness` (finish time, stored steps) changes while a run records and
    when it ends, so rows read mid-run are never shown for the finished run. A shared resource, not
    a copy per call (cache_data unpickles thousands of rows at every step click): read-only here."""
    return stored_runs.token_stats(db_url, run_id, reference)


def references() -> list[str]:
    return stored_runs.token_stat_references(state.db(), run.id)


@st.fragment
def viewer() -> None:
    current = min(st.session_state.get("decode_step", 0), len(steps) - 1)
    st.session_state["decode_slider"] = current + 1  # one source of truth: decode_step (0-based)
    buttons = st.columns([1.4, 1.1, 2.6, 4.9])
    buttons[0].button("◀ Previous", key="decode_prev", on_click=move, args=(-1,), disabled=current == 0)
    buttons[1].button(
        "Next ▶", key="decode_next", on_click=move, args=(1,), disabled=current >= len(steps) - 1
    )
    upcoming = next_rejection(current)
    buttons[2].button(
        "No later rejection" if upcoming is None else f"Next rejection: step {upcoming + 1} »",
        key="decode_next_rejection",
        on_click=move,
        kwargs={"to_rejection": True},
        disabled=upcoming is None,
        help="The first step after this one where the target rejected a draft (it may be the next step).",
    )
    if len(steps) > 1:
        st.slider(
            "Verify step",
            1,
            len(steps),
            key="decode_slider",
            on_change=lambda: st.session_state.update(decode_step=st.session_state["decode_slider"] - 1),
            help="Steps count from 1 to the run's verify steps. Arrow keys move the slider once it has "
            "focus; Tab reaches the buttons; clicking a token of the output below jumps to its step.",
        )
    step = steps[current]
    statuses = step_statuses(step.drafted_ids, step.accepted_count)
    rejected = f"rejected at d{step.accepted_count + 1}" if "rejected" in statuses else "all accepted"
    is_tree = bool(step.tree) and int(run.params.get("topk") or 1) > 1
    left, right = st.columns([3, 2])
    with left:
        st.markdown(
            f"**Step {current + 1}** of {len(steps)}: pending token at position {step.position}; "
            + (
                f"accepted a path of {step.accepted_count} of the tree's {len(step.tree['tokens'])} nodes "
                f"(main path: {len(step.drafted_ids)} deep, {rejected}); "
                if is_tree
                else f"accepted {step.accepted_count} of {len(step.drafted_ids)} drafts ({rejected}); "
            )
            + f"draft {step.draft_ms:.1f} ms, verify {step.verify_ms:.1f} ms"
        )
        sequence = run.prompt_ids + run.output_ids
        st.caption("Recent context (up to the pending token)")
        st.html(CSS + context_html(sequence[: step.position + 1], pieces))
        st.caption(
            "Drafted tokens: draft probability, top-5 alternatives, and the target's argmax at the same "
            "verify row (a rejection is where they differ)"
        )
        st.html(CSS + legend() + chips_html(step, pieces))
        if step.tree and (int(run.params.get("topk") or 1) > 1 or run.params.get("sampling_rule")):
            tree = step.tree
            st.caption(
                f"The step's draft tree: {len(tree['tokens'])} nodes, depth left to right, siblings stacked "
                "(highest draft probability on top); q = draft probability given the parent, s = score "
                "(product of q along the path). Green: accepted path; red: the first rejected node; "
                "hover a node for the target's probability, its argmax and the draw."
                + (
                    f" Expected accepted here: {tree['expected_accepted']:.2f}."
                    if tree.get("expected_accepted") is not None
                    else ""
                )
            )
            st.plotly_chart(tree_figure(tree, step.pending_token, pieces), key="decode_tree")
        st.caption(
            "Output (step boundaries marked, current step outlined; a window of steps around it). "
            "Click a token to open the step that produced it."
        )
        first = run.output_ids[0] if run.output_ids else None
        clicked = clickable_steps(
            CSS + output_html(first, steps, pieces, current, window=30), "decode_output"
        )
        if clicked is not None and clicked != current and 0 <= clicked < len(steps):
            st.session_state["decode_step"] = clicked
            st.rerun(scope="fragment")
    with right:
        hidden_panel(step)


def hidden_panel(step) -> None:
    st.markdown("**Hidden states at this step's positions**")
    options = ["fed features only (norms)"] + references()
    pending = st.session_state.pop("decode_reference_pending", None)
    if pending in options:
        st.session_state["decode_reference"] = pending
    reference = st.selectbox("Reference", options, key="decode_reference")
    version = st.session_state.get("decode_stats_version", 0)
    freshness = (run.finished_at, run.step_count, len(steps))
    rows = token_stats(state.db(), run.id, None if reference == options[0] else reference, version, freshness)
    window = set(range(step.position, step.position + step.accepted_count + 1))
    here = [r for r in rows if r["position"] in window]
    if here:
        frame = pd.DataFrame(here).drop(columns=["reference"]).dropna(axis="columns", how="all")
        frame["chunk"] = frame["chunk"].map(chunk_labels(frame["chunk"]))
        # a static table: a step click redraws it, and a grid widget costs more to mount than to read
        st.table(frame.set_index("position").style.format(precision=4, na_rep="—"))
        if reference == options[0]:
            st.caption("Norms of the features the draft was fed; add a reference below to compare them.")
    elif rows:
        st.caption(
            f"No rows for positions {step.position}..{step.position + step.accepted_count} under this "
            f"reference: it covers positions {min(r['position'] for r in rows)}.."
            f"{max(r['position'] for r in rows)}."
        )
    else:
        st.caption("No rows stored under this reference.")
    if rows:
        value = "norm" if reference == options[0] else "cosine"
        auto = st.toggle(
            "Auto colour range", key="decode_heatmap_auto", help="Off: the scale is fixed by meaning."
        )
        positions = [r["position"] for r in rows]
        st.plotly_chart(
            charts.heatmap(
                rows,
                value,
                f"{value} · positions {min(positions)}..{max(positions)} · step "
                f"{st.session_state.get('decode_step', 0) + 1} outlined",
                mark=(step.position, step.position + step.accepted_count),
                auto_range=auto,
            ),
            key="decode_heatmap",
        )


def reference_adder() -> None:
    """Outside the step viewer's fragment: the reference job's progress polls on its own, and its end
    reruns the whole page, which then shows the new reference selected."""
    with st.expander("Add a hidden-state reference (compare the fed features with another source)"):
        kind = st.radio(
            "Compare the fed features with",
            ["another wiring", "training features (.ckpt)", "a second run", "target hidden vs draft output"],
            key="decode_reference_kind",
        )
        spec = None
        try:
            if kind == "another wiring":
                text = st.text_input("HF indices", "0,2,4", key="decode_reference_wiring")
                spec = {"kind": "wiring", "aux_hf_indices": list(parse_aux_indices(text) or ())}
            elif kind == "training features (.ckpt)":
                path = st.text_input(
                    "Feature file", "demo/data/features/data_0.ckpt", key="decode_reference_ckpt"
                )
                spec = {"kind": "features", "path": path}
            elif kind == "a second run":
                others = [r for r in list_runs(limit=200) if r.id != run.id]
                if others:
                    labels = {r.id: run_label(r) for r in others}
                    picked = st.selectbox(
                        "Run", list(labels), format_func=labels.get, key="decode_reference_run"
                    )
                    spec = {"kind": "run", "run_id": picked}
            else:
                spec = {"kind": "target_hidden"}
        except BadInput as error:
            st.error(str(error))
            spec = None
        if st.button("Compute", key="decode_reference_compute", disabled=spec is None):
            st.session_state["decode_reference_task"] = tasks.start_reference(state.db(), run.id, spec)

    def show_reference(result: dict) -> None:
        st.success(
            f"{result['rows']} rows stored as '{md(result['reference'])}' "
            f"({result.get('positions', '?')} positions compared)"
        )
        if result.get("warning"):
            st.warning(md(result["warning"]))

    def pick_up_reference(result: dict) -> None:
        st.session_state["decode_stats_version"] = st.session_state.get("decode_stats_version", 0) + 1
        st.session_state["decode_reference_pending"] = result["reference"]  # selected on the next run

    task_panel("decode_reference_task", show_reference, on_finish=pick_up_reference, adopt="reference")


viewer()
reference_adder()

# ----------------------------------------------------------------------------- run summary

st.subheader("Run summary")
c1, c2 = st.columns(2)
c1.plotly_chart(
    charts.acceptance_bars(
        {
            "marginal P(a >= i)": metrics.get("per_position_marginal") or [],
            "conditional P(a >= i | a >= i-1)": [
                v or 0 for v in metrics.get("per_position_conditional") or []
            ],
        },
        "Per-position acceptance",
    ),
    key="decode_acceptance",
)
c2.plotly_chart(
    charts.histogram(metrics.get("accept_histogram") or [], "Accepted drafts per step"),
    key="decode_histogram",
)
st.plotly_chart(
    charts.step_times([s.draft_ms for s in steps], [s.verify_ms for s in steps]), key="decode_times"
)
st.caption(
    f"{ACCEPT_LENGTH_HELP}. Marginal: {DEFINITIONS.get('per_position_marginal', '')}. "
    f"Conditional: {DEFINITIONS.get('per_position_conditional', '')}."
)

if run.status == "running" and not tasks.MANAGER.get(st.session_state.get("decode_task")):
    # A run recording elsewhere (the CLI, or a job this browser session lost on reload): the page
    # re-reads it every 2 s until it ends, so its numbers are never a stale snapshot.
    time.sleep(2.0)
    st.rerun()
