"""Compare: two drafts (or two existing runs) on the same sample, and a batch over a dataset."""

from __future__ import annotations

import os

import pandas as pd
import streamlit as st

from backend import BadInput
from backend.engine.records import decoding_mode
from backend.service import tasks
from ui import charts, state
from ui.compare import (
    batch_sentence,
    batch_summary,
    committed_positions,
    difference_html,
    first_divergence,
    timeline_html,
    timeline_legend,
)
from ui.html import CSS, md
from ui.pickers import dataset_picker, run_label
from ui.runs import ACCEPT_LENGTH_HELP, get_run, list_runs
from ui.taskview import task_panel
from ui.tokens import Pieces

st.set_page_config(page_title="SpecLens · Compare", layout="wide")
state.sidebar()
st.title("Compare")

names = list(state.drafts())
compare_task = tasks.MANAGER.get(st.session_state.get("compare_task"))
running = compare_task is not None and compare_task.active
with st.expander("Run two drafts", expanded=not state.get_value("compare")):
    c1, c2, c3, c4 = st.columns(4)
    index_a = state.linked_index("a", "compare_draft_a", names, "epoch1")  # Home: ?a=final&b=miswired
    index_b = state.linked_index("b", "compare_draft_b", names, "final")
    draft_a = c1.selectbox("Draft A", names, index=index_a, key="compare_draft_a")
    draft_b = c2.selectbox("Draft B", names, index=index_b, key="compare_draft_b")
    steps = int(c3.number_input("K", 1, 16, 4, key="compare_steps"))
    max_new = int(c4.number_input("Max new tokens", 1, 2048, 96, key="compare_max_new"))
    st.caption(
        "Decoding per side (SGLang's flags): topk 1 is a chain; topk > 1 drafts a tree of N verified "
        "tokens. Pick the same draft twice to compare a chain and a tree of it."
    )
    d1, d2, d3, d4 = st.columns(4)
    topk_a = int(d1.number_input("topk A", 1, 16, 1, key="compare_topk_a"))
    tokens_a = int(d2.number_input("Draft tokens N A (0: K+1)", 0, 256, 0, key="compare_tokens_a"))
    topk_b = int(d3.number_input("topk B", 1, 16, 1, key="compare_topk_b"))
    tokens_b = int(d4.number_input("Draft tokens N B (0: K+1)", 0, 256, 0, key="compare_tokens_b"))
    reuse = st.checkbox(
        "Reuse finished runs of the same draft, sample and settings",
        value=True,
        key="compare_reuse",
        help="A finished run of the same target, draft, prompt, K, topk, N, max new tokens, sampling, "
        "engine reading and wiring override (on this machine's device and dtype) stands in for a new "
        "replay. Untick it after changing a draft's files in place.",
    )
    dataset_id, samples = dataset_picker("compare_dataset")
    if samples:
        single, batch = st.columns(2)
        index = single.number_input("Sample #", 0, len(samples) - 1, 0, key="compare_index")
        count = batch.number_input(
            "Batch: first N samples", 1, len(samples), min(6, len(samples)), key="compare_batch_n"
        )
        ray_address = batch.text_input(
            "Run the batch on Ray (address, 'local', or empty: here)",
            os.environ.get("SPECLENS_RAY_ADDRESS", ""),
            key="compare_ray",
            help="As python -m backend evaluate --ray: one worker per GPU (or CPU slot), each loading the "
            "models once; every run goes to this database, which the workers must reach.",
        ).strip()
        chosen = None
        if single.button("Compare on this sample", key="compare_start_one", disabled=running):
            chosen = [samples[int(index)]]
        ray = None
        if batch.button("Compare on N samples", key="compare_start_batch", disabled=running):
            chosen, ray = samples[: int(count)], ray_address or None
        if running:
            st.caption("A comparison is running (progress below); start the next one when it ends.")
        if chosen:
            try:
                st.session_state["compare_task"] = tasks.start_compare(
                    state.db(),
                    state.target_path(),
                    state.drafts()[draft_a],
                    state.drafts()[draft_b],
                    chosen,
                    steps,
                    max_new,
                    dataset_id,
                    {"topk": topk_a, "num_draft_tokens": tokens_a or None},
                    {"topk": topk_b, "num_draft_tokens": tokens_b or None},
                    reuse=reuse,
                    ray=ray,
                )
            except BadInput as error:
                st.error(md(error))
            else:
                st.rerun()  # drawn again as running: buttons off, the previous table hidden, progress


def pick_up(result: dict) -> None:
    """A finished comparison: its table replaces the previous one and its first row (the largest
    |delta|; the only one for a single sample) is opened below."""
    rows = result["rows"]
    state.set_value("compare", (rows[0]["run A"], rows[0]["run B"]))
    st.session_state["compare_result"] = {**result, "task": st.session_state.get("compare_task")}


task_panel("compare_task", on_finish=pick_up, adopt="compare")
result = st.session_state.get("compare_result")
if result and running:
    st.info(
        f"The previous comparison's table ({len(result['rows'])} sample(s)) is hidden while a new "
        "comparison runs; the new table shows here when it ends."
    )
elif result:
    rows = result["rows"]
    st.subheader("Samples where the drafts differ most")
    summary = batch_summary(rows)
    if summary["samples"]:
        s = st.columns(5)
        s[0].metric("Mean AL A", f"{summary['mean AL A']:.2f}", help=ACCEPT_LENGTH_HELP)
        s[1].metric("Mean AL B", f"{summary['mean AL B']:.2f}", help=ACCEPT_LENGTH_HELP)
        s[2].metric("Mean delta (B - A)", f"{summary['mean delta']:+.2f}")
        s[3].metric("Wins A / B / ties", f"{summary['wins A']} / {summary['wins B']} / {summary['ties']}")
        s[4].metric("Samples", summary["samples"])
        names = result.get("drafts") or {}
        st.markdown(
            "**"
            + md(
                batch_sentence(
                    summary, state.draft_name(names.get("A", "A")), state.draft_name(names.get("B", "B"))
                )
            )
            + "**"
        )
    reused, replayed = result.get("reused", 0), result.get("replayed", 0)
    st.caption(
        f"Over {summary['samples']} sample(s): the mean of each run's accept length ({ACCEPT_LENGTH_HELP}); "
        "a win is a sample where that draft's accept length is higher. "
        + (
            f"{summary['without AL']} sample(s) without an accept length are left out. "
            if summary["without AL"]
            else ""
        )
        + f"{reused} run(s) reused (finished runs of the same draft, sample and settings), {replayed} replayed."
    )
    table = pd.DataFrame(rows)
    table_key = f"compare_table_{result.get('task')}"  # a new batch starts with no row ticked
    picked = st.dataframe(
        table, hide_index=True, key=table_key, on_select="rerun", selection_mode="single-row"
    )
    st.caption("Click a row to open both of its runs below.")
    selection = picked.selection.rows if picked is not None else []
    if selection and st.session_state.get("compare_table_applied") != (table_key, selection[0]):
        st.session_state["compare_table_applied"] = (table_key, selection[0])
        row = table.iloc[selection[0]]
        state.set_value("compare", (int(row["run A"]), int(row["run B"])))
    elif not selection:
        st.session_state.pop("compare_table_applied", None)

st.subheader("Two runs side by side")
runs = list_runs(limit=300)
if len(runs) < 2:
    st.info("Need two runs: start them above or on the Decode page.")
    st.stop()
run_ids = [r.id for r in runs]
preset = state.get_value("compare") or (run_ids[1], run_ids[0])
label = {r.id: run_label(r) for r in runs}
c1, c2 = st.columns(2)


def picked_here() -> None:
    """The user picked a run in a select box: that pair is the shared choice now, so a row clicked
    later (even the one clicked before) opens its pair again."""
    chosen = (st.session_state["compare_run_a"], st.session_state["compare_run_b"])
    state.set_value("compare", chosen)
    state.followed("compare_run_a", chosen[0])
    state.followed("compare_run_b", chosen[1])


state.follow("compare_run_a", preset[0], run_ids)  # a finished comparison or a ticked row is shown
state.follow("compare_run_b", preset[1], run_ids)
run_a_id = c1.selectbox(
    "Run A",
    run_ids,
    index=run_ids.index(preset[0]) if preset[0] in run_ids else 0,
    format_func=label.get,
    key="compare_run_a",
    on_change=picked_here,
)
run_b_id = c2.selectbox(
    "Run B",
    run_ids,
    index=run_ids.index(preset[1]) if preset[1] in run_ids else 1,
    format_func=label.get,
    key="compare_run_b",
    on_change=picked_here,
)
(run_a, steps_a), (run_b, steps_b) = get_run(run_a_id), get_run(run_b_id)
if run_a is None or run_b is None:
    st.error("A chosen run no longer exists.")
    st.stop()
if run_a.prompt_ids != run_b.prompt_ids:
    st.warning("The two runs have different prompts: positions are aligned, but the texts differ.")
al_a = run_a.metrics.get("mean_accept_length") or 0
al_b = run_b.metrics.get("mean_accept_length") or 0
m = st.columns(5)
m[0].metric("Accept length A", f"{al_a:.2f}", help=ACCEPT_LENGTH_HELP)
m[1].metric("Accept length B", f"{al_b:.2f}", delta=f"{al_b - al_a:+.2f}", help=ACCEPT_LENGTH_HELP)
m[2].metric("Steps A / B", f"{len(steps_a)} / {len(steps_b)}")
st.caption(f"A: {decoding_mode(run_a.params)} · B: {decoding_mode(run_b.params)}")
positions_a, positions_b = committed_positions(run_a, steps_a), committed_positions(run_b, steps_b)
divergence = first_divergence(positions_a, positions_b)
m[3].metric(
    "Drafts first differ at",
    "nowhere" if divergence is None else f"output {divergence - len(run_a.prompt_ids)}",
    help="The first output position (0 = the first output token) where the two drafts proposed "
    "different tokens: outlined below, and said in words under the timelines",
)
output_divergence = next(
    (i for i, (a, b) in enumerate(zip(run_a.output_ids, run_b.output_ids, strict=False)) if a != b),
    None
    if len(run_a.output_ids) == len(run_b.output_ids)
    else min(len(run_a.output_ids), len(run_b.output_ids)),
)
m[4].metric(
    "Outputs first differ at",
    "nowhere (same output)" if output_divergence is None else f"output {output_divergence}",
    help="The first output position where the two runs emitted different tokens (different prompts, "
    "sampling, or a non-greedy run). In greedy mode both outputs are the target's own and never differ; "
    "the drafts' proposals can.",
)
pieces = Pieces(run_a.target_path)
length = max(len(run_a.output_ids), len(run_b.output_ids))
start_at = len(run_a.prompt_ids)
if length > 300:
    offset = st.slider("Output window start", 0, length - 1, 0, step=50, key="compare_offset")
else:
    offset = 0
window = (start_at + offset, start_at + offset + 300)
st.html(
    CSS
    + timeline_legend()
    + "<b>A</b>"
    + timeline_html(run_a, positions_a, pieces, *window, divergence)
    + "<b>B</b>"
    + timeline_html(run_b, positions_b, pieces, *window, divergence)
    + difference_html(run_a, run_b, positions_a, positions_b, pieces)
)
st.caption(
    "Each token is coloured by how its run produced it; hover a token for its output position, "
    "verify step and what the draft proposed there. Tokens in quotes show whitespace: ␣ is a space."
)
st.plotly_chart(
    charts.acceptance_bars(
        {
            "A marginal": run_a.metrics.get("per_position_marginal") or [],
            "B marginal": run_b.metrics.get("per_position_marginal") or [],
        },
        "Per-position acceptance P(a >= i), overlaid",
    ),
    key="compare_bars",
)
