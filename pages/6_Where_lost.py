"""Where lost: over a set of stored runs (an evaluation, a Compare batch), where each draft loses
acceptance: by draft position, token kind, target confidence, context length, source and span; its
calibration and a confidence-threshold what-if. Reads the store only (no torch here)."""

from __future__ import annotations

import streamlit as st

from backend import BadInput
from backend.service import where_lost as lost
from ui import state
from ui import where_lost as view
from ui.html import md
from ui.numbers import plural

st.set_page_config(page_title="SpecLens · Where lost", layout="wide")
state.sidebar()
st.title("Where lost")
st.write(
    "Over stored runs of the active target (an `evaluate`, a Compare batch, Decode runs), where each draft "
    "loses acceptance: which draft positions, which kinds of token, how confident the target was, how long "
    "the context, which prompts; and whether the draft's own probability says when it will be rejected."
)

offered = lost.choices(state.db(), state.target_path())
if not offered.drafts:
    st.info(
        "No finished replay of this target yet. Run a batch first: Compare's batch over a dataset, or "
        "`speclens evaluate --drafts A,B --samples FILE`; then come back."
    )
    st.stop()
c1, c2, c4, c3 = st.columns([3, 1.5, 2, 2])
names = list(offered.drafts)
drafts = c1.multiselect(
    "Drafts",
    names,
    default=names[:2],
    key="lost_drafts",
    help="each draft's runs are one group; two side by side",
)
OWN = "per draft"  # each draft at its own most-run K and decoding
k = c2.selectbox(
    "K (draft steps)",
    [*offered.ks, None],
    format_func=lambda value: OWN if value is None else str(value),
    key="lost_k",
    help="runs of one draft length at a time; per draft: every draft at the K and decoding it was run "
    "with most (an EAGLE-3 draft at K 4 beside a DFlash draft at its block's 7)",
)
mode = c4.selectbox(
    "Decoding",
    offered.modes,
    key="lost_mode",
    help="chain or tree, greedy or sampled: one at a time (with K each draft's own, each its most-run)",
    disabled=k is None,
)
every = "every sample and typed prompt"
dataset = c3.selectbox(
    "Samples from",
    [None, *offered.datasets],
    format_func=lambda d: every if d is None else f"{offered.datasets[d]} (dataset {d})",
    key="lost_dataset",
)
if not drafts:
    st.info("Choose a draft.")
    st.stop()
run_ids = lost.chosen_runs(state.db(), offered, [offered.drafts[n] for n in drafts], k, dataset, mode)
if not run_ids:
    shape = "at each one's own K" if k is None else f"at K={k}, {md(mode)},"
    st.info(f"No finished run of {md(', '.join(drafts))} {shape} on these samples.")
    st.stop()
try:
    found = view.where_lost(state.db(), tuple(run_ids))
except BadInput as error:
    st.error(md(error))
    st.stop()
st.caption(
    f"{plural(len(run_ids), 'finished run')} "
    f"({md('each draft at its own: ' + '; '.join(lost.shapes_of(offered, run_ids))) if k is None else md(mode)}; "
    "per draft and prompt the run with the most verify steps): "
    + "; ".join(
        f"{md(d.name)}: {plural(d.runs, 'run')}, {plural(d.verify_steps, 'verify step')}, "
        f"{plural(d.attempts, 'attempt')}"
        for d in found.drafts
    )
    + ". An attempt is a draft the target judged (see Definitions)."
)
for d in found.drafts:
    for note in d.notes:
        st.caption(f"{md(d.name)}: {md(note)}")
view.definitions()

SPLITS = (
    ("by_kind", "By token kind: what the target emitted at the attempt", "the target's token, by kind"),
    ("by_entropy", "By target entropy: its uncertainty there (nats)", "target's entropy at the attempt"),
    ("by_confidence", "By target confidence: its top-1 probability there", "target's top-1 probability"),
    ("by_context", "By context length", "tokens before the attempt"),
    ("by_source", "By prompt source (the sample's source field)", "source"),
    ("by_span", "By span: thinking vs answer", "span of the output"),
    ("by_block", "By block: code vs prose (fenced ``` blocks of the output)", "where in the output"),
)

st.subheader("By draft position")
event = st.plotly_chart(view.position_figure(found), key="lost_position", on_select="rerun")
view.show_steps(found, "by_position", view.clicked(event), "lost_position")

for split, title, axis in SPLITS:
    if not any(getattr(d, split) for d in found.drafts):
        continue
    st.subheader(title.split(":")[0])
    event = st.plotly_chart(
        view.group_figure(found, split, title, axis), key=f"lost_{split}", on_select="rerun"
    )
    view.show_steps(found, split, view.clicked(event), f"lost_{split}")
    if split == "by_kind":
        st.markdown("**Top rejected target tokens** (what the target emitted where the draft was rejected)")
        view.rejected(found)

trees, sampled = view.tree_table(found), view.sampled_table(found)
if trees is not None:
    st.subheader("Tree steps: by depth and branch")
    st.dataframe(trees, hide_index=True, key="lost_tree")
    st.caption(view.TREE_HELP)
if sampled is not None:
    st.subheader("Sampled steps: drawn vs expected acceptance")
    st.dataframe(sampled, hide_index=True, key="lost_sampled")
    st.caption(view.SAMPLED_HELP)

st.subheader("Calibration and a confidence threshold")
left, right = st.columns(2)
left.plotly_chart(view.calibration_figure(found), key="lost_calibration")
right.dataframe(view.ece_table(found), hide_index=True, key="lost_ece")
st.markdown("**What-if: stop drafting below a draft probability** (from the stored steps; assumptions below)")
st.dataframe(view.threshold_table(found), hide_index=True, key="lost_threshold")
for line in lost.best_thresholds(found):
    st.markdown(md(line))
st.caption(md(lost.THRESHOLD_ASSUMPTIONS))
view.downloads(state.db(), run_ids)
