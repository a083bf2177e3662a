"""The Compare page's form: two drafts, K, the decoding of each side, and one sample or the first N,
read into one tasks.Comparison."""

from __future__ import annotations

import os

import streamlit as st

from backend import BadInput
from backend.run.request import MAX_STEPS, VIA_CHOICES, ReplayRequest
from backend.service import runs as stored_runs
from backend.service.ray_eval import address_problem
from backend.service.tasks import Comparison
from ui import state
from ui.html import md
from ui.numbers import setting_number, whole
from ui.pickers import dataset_picker, sample_preview

REUSE_HELP = (
    "A finished run of the same target, draft, prompt, K, topk, N, max new tokens, sampling, engine "
    "reading and wiring override (on this machine's device and dtype) stands in for a new replay. "
    "Untick it after changing a draft's files in place."
)
VIA_LABELS = {"step": "a forward per step", "trace": "a trace per sample"}
VIA_HELP = (
    "A forward per step: the target verifies every step of each draft (trees and sampling too). A trace per "
    "sample: the target runs once per sample (kept beside the database, reused by both drafts and later "
    "comparisons), then only the drafts run; greedy decoding (chains and trees), the same counts in fp32 (docs/traces.md)."
)
RAY_HELP = (
    "As python -m backend evaluate --ray: one worker per GPU (or CPU slot), each loading the models "
    "once; every run goes to this database, which the workers must reach."
)


def _decoding(steps: int | None) -> tuple[dict, dict] | None:
    """Each side's K and tree settings (`steps`: the K both take unless B names its own); None when a
    number is out of range (said under it)."""
    st.caption(
        "Decoding per side (SGLang's flags): topk 1 is a chain; topk > 1 drafts a tree of N verified "
        "tokens. Pick the same draft twice to compare a chain and a tree of it; give B its own K to hold "
        "an EAGLE-3 draft at its K against a DFlash draft at its block (block_size - 1)."
    )
    d1, d2, d3, d4, d5 = st.columns(5)
    topk_a = whole(d1, "topk A", 1, 16, 1, "compare_topk_a")
    tokens_a = whole(d2, "Draft tokens N A (0: K+1)", 0, 256, 0, "compare_tokens_a")
    topk_b = whole(d3, "topk B", 1, 16, 1, "compare_topk_b")
    tokens_b = whole(d4, "Draft tokens N B (0: K+1)", 0, 256, 0, "compare_tokens_b")
    steps_b = whole(d5, "K B (0: the same K)", 0, MAX_STEPS, 0, "compare_steps_b")
    if None in (steps, topk_a, tokens_a, topk_b, tokens_b, steps_b):
        return None
    return (
        {"num_steps": steps, "topk": topk_a, "num_draft_tokens": tokens_a or None},
        {"num_steps": steps_b or steps, "topk": topk_b, "num_draft_tokens": tokens_b or None},
    )


def _which_samples(samples: list, running: bool, invalid: bool = False) -> tuple[list | None, str | None]:
    """(the samples a button asked for, the Ray address for a batch), or (None, None)."""
    single, batch = st.columns(2)
    index = whole(single, "Sample #", 0, len(samples) - 1, 0, "compare_index")
    if index is not None:
        sample_preview(samples[index], state.target_path(), single)
    count = whole(batch, "Batch: first N samples", 1, len(samples), min(6, len(samples)), "compare_batch_n")
    ray_address = batch.text_input(
        "Run the batch on Ray (address, 'local', or empty: here)",
        os.environ.get("SPECLENS_RAY_ADDRESS", ""),
        key="compare_ray",
        help=RAY_HELP,
    ).strip()
    if single.button(
        "Compare on this sample", key="compare_start_one", disabled=running or invalid or index is None
    ):
        return [samples[index]], None
    if batch.button(
        "Compare on N samples", key="compare_start_batch", disabled=running or invalid or count is None
    ):
        refused = address_problem(ray_address)
        if refused:
            batch.error(md(refused))
            return None, None
        return samples[:count], ray_address or None
    if running:
        st.caption("A comparison is running (progress below); start the next one when it ends.")
    return None, None


def _shown_drafts(names: list[str]) -> tuple[str, str]:
    """The drafts of the runs on screen below (`pair.shown_pair`: so the pickers, made anew when the
    page is entered again or in a new session, match them), else epoch1 vs final. Two runs of one
    draft (the two newest runs of a new session can be two Decode replays) name no pair of drafts: the
    pickers then offer epoch1 vs final, not the same draft twice."""
    from ui.compare.pair import shown_pair
    from ui.runs import list_runs

    listed = list_runs(limit=300)
    shown = shown_pair([r.id for r in listed], [r.id for r in listed if r.status == "finished"])
    if shown:
        found = [stored_runs.get_run(state.db(), int(run_id)) for run_id in shown]
        if all(found):
            a, b = (state.draft_name(run.draft_path) for run in found)
            if a in names and b in names and a != b:
                return a, b
    return "epoch1", "final"


def comparison(running: bool) -> Comparison | None:
    """The form (its buttons off while a comparison runs); what a button asked for, else None."""
    names = list(state.drafts())
    with st.expander("Run two drafts", expanded=not state.get_value("compare")):
        c1, c2, c3, c4 = st.columns(4)
        shown_a, shown_b = _shown_drafts(names)
        opens_a = state.linked_select("a", "compare_draft_a", names, shown_a)  # Home: ?a=final&b=miswired
        opens_b = state.linked_select("b", "compare_draft_b", names, shown_b)
        draft_a = c1.selectbox("Draft A", names, key="compare_draft_a", **opens_a)
        draft_b = c2.selectbox("Draft B", names, key="compare_draft_b", **opens_b)
        steps = setting_number(c3, "num_steps", "compare_steps")
        max_new = setting_number(c4, "max_new_tokens", "compare_max_new")
        decoding = _decoding(steps)
        invalid = decoding is None or max_new is None
        reused, side = st.columns([3, 2])
        reuse = reused.checkbox(
            "Reuse finished runs of the same draft, sample and settings",
            value=True,
            key="compare_reuse",
            help=REUSE_HELP,
        )
        via = side.radio(
            "Target's side",
            VIA_CHOICES,
            format_func=VIA_LABELS.get,
            horizontal=True,
            key="compare_via",
            help=VIA_HELP,
        )
        dataset_id, samples = dataset_picker("compare_dataset")
        if not samples:
            return None
        chosen, ray = _which_samples(samples, running, invalid)
        if not chosen or decoding is None:
            return None
        decoding_a, decoding_b = decoding
        first = tuple(chosen[0].prompt_ids)  # each side's template; every sample's prompt goes in later
        try:
            a, b = (
                ReplayRequest(
                    state.target_path(),
                    state.drafts()[draft],
                    prompt_ids=first,
                    max_new_tokens=max_new,
                    via=via,
                    **shape,
                )
                for draft, shape in ((draft_a, decoding_a), (draft_b, decoding_b))
            )
        except BadInput as error:
            st.error(md(error))
            return None
        return Comparison(a, b, chosen, dataset_id, reuse, ray)
