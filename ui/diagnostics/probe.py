"""The wiring probe tab: the draft's training loss (and acc_0) under candidate wirings, the copy-paste config."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from backend.service import kept_results, tasks
from ui import state
from ui.numbers import setting_number, whole
from ui.pickers import first_samples
from ui.taskview import task_panel

VIA = {  # how the live replays run (ProbeSettings.via)
    "step": "the target verifying each step (best, declared, runner-up)",
    "trace": "over traces (every candidate; ranks by exact accept length)",
}


def candidate_table(report) -> tuple[pd.DataFrame, dict]:
    """The candidates as a table, and its column config: short headers with their definitions on hover,
    numbers in narrow columns, and "why tried" as wide as its longest reason, so that the whole table
    fits the page beside the sidebar at 1440 px (the default width cut "embedding, low, middle (the shift
    in docs/seed-story.md)" to "embedding, low, middl…", and a wider column alone pushed the reasons past
    the page's edge)."""
    table = pd.DataFrame(
        [
            {
                "HF indices": str(c.aux_hf_indices),
                "loss (nats)": c.loss,
                "acc_0": c.acc_step0,
                "mean p": c.mean_prob,
                "predicted AL": c.predicted_accept_length,
                "live AL": c.live_accept_length,
                "why tried": c.label,
            }
            for c in report.candidates
        ]
    )
    numbers = {  # header: (format, width in px, definition on hover)
        "loss (nats)": ("%.3f", 85, "the draft's training loss at TTT step 0; ranks (lower first) by step"),
        "acc_0": ("%.3f", 65, "teacher-forced top-1 accuracy at TTT step 0"),
        "mean p": ("%.3f", 65, "the draft's mean probability of the target's token"),
        "predicted AL": ("%.2f", 95, "predicted accept length: 1 + sum_k prod_(j<=k) acc_j"),
        "live AL": ("%.2f", 70, "accept length of live replays; ranks over traces"),
    }
    longest = max((len(c.label) for c in report.candidates), default=0)
    columns = {
        "HF indices": st.column_config.TextColumn("HF indices", width=90),
        **{
            name: st.column_config.NumberColumn(name, format=shown, width=width, help=meaning)
            for name, (shown, width, meaning) in numbers.items()
        },
        "why tried": st.column_config.TextColumn(
            "why tried", width=max(160, 7 * longest + 24)
        ),  # ~7 px a character
    }
    return table, columns


def _render(report) -> None:
    """`report`: a wiring probe's ProbeResult (backend/diagnostics/probe_settings.py)."""
    (st.success if report.confirmed else st.error)(report.verdict)
    table, columns = candidate_table(report)
    st.dataframe(table, hide_index=True, key="probe_table", column_config=columns)
    rule = report.separation
    over_traces = report.settings.via == "trace"
    ranked = (
        "ranked by the exact accept length of live replays over traces (the target computed once per "
        "sample, each candidate replayed by the draft alone; training loss breaks ties)"
        if over_traces
        else "ranked by training loss: the draft's cross-entropy against the target's distribution over the "
        "draft vocabulary at TTT step 0 (what it was trained to lower; lower is better)"
    )
    told = (
        f"Two wirings are told apart when one's accept length is {rule.t_separate:g} standard errors below "
        "the other's (each verify step a unit). "
        if rule and over_traces
        else f"Two wirings are told apart when one's loss is {rule.t_separate:g} standard errors above the "
        f"other's, paired position by position (standard errors from blocks of {rule.block} positions). "
        if rule
        else "This probe was kept by an older version: ranked by acc_0, told apart over samples. "
    )
    st.caption(
        f"{len(report.candidates)} candidates on {report.n_samples} samples in {report.seconds:.1f} s, "
        f"{ranked}. loss: the draft's training loss at TTT step 0; acc_0: teacher-forced top-1 accuracy "
        "there; mean p: the probability the draft gives the target's greedy token there; live AL: the "
        f"accept length of live replays (1 + mean accepted drafts per verify step), where they ran. {told}"
        "Predicted AL (accept length) = 1 + sum_k prod_(j<=k) acc_j, for the reported wirings."
    )
    if report.config is None:  # tied: the verdict above says how to separate them; nothing to paste
        return
    st.code(
        f"# SGLang (draft config.json)\n{json.dumps(report.config.sglang)}\n"
        f"# vLLM (draft config.json)\n{json.dumps(report.config.vllm)}",
        language="json",
    )


def probe_tab() -> None:
    if state.draft_is_dflash():
        from ui.diagnostics.layer_probe import layer_probe_tab

        layer_probe_tab()
        return
    st.markdown(
        "Which three target hidden states was this draft trained on? The draft's training loss "
        "(teacher-forced, against the target) under candidate wirings (declared in each convention, defaults, ±1 shifts, embedding output, local search)."
    )
    samples = first_samples("probe", default_n=8)
    c1, c2, c3 = st.columns(3)
    steps = setting_number(c1, "num_steps", "probe_steps")
    budget = whole(c2, "Search budget (extra candidates)", 0, 200, 20, "probe_budget")
    live = whole(c3, "Live replays on first N samples", 0, 16, 0, "probe_live")
    via = st.radio(
        "Live replays",
        list(VIA),
        format_func=VIA.get,
        horizontal=True,
        key="probe_via",
        help="Over traces the target runs once per sample (every layer) and every candidate is replayed "
        "exactly by the draft alone; the candidates then rank by that accept length (docs/traces.md).",
    )
    ready = bool(samples) and None not in (steps, budget, live)
    wanted = kept_results.probe_settings(steps, budget, live, samples, via) if ready else None
    known = kept_results.known_probe(state.target_path(), state.draft_path(), state.db())
    if st.button("Run the probe", key="probe_run", disabled=not ready):
        st.session_state["probe_task"] = tasks.start_probe(
            state.target_path(), state.draft_path(), samples, steps, budget, live, via
        )
    elif known and known.candidates and "probe_task" not in st.session_state:  # measured already: show it
        _reused(known, wanted)
    task_panel(
        "probe_task",
        _render,
        on_finish=lambda report: kept_results.remember_probe(report.target, report.draft, report, state.db()),
        adopt="probe",
    )


def _reused(known, wanted) -> None:
    """The stored probe of this pair (a ProbeResult), and whether it answers the settings on screen
    (`wanted`: probe_settings.SettingsUsed)."""
    ran = known.settings
    names = {"num_steps": "K", "search_budget": "search budget", "live_samples": "live replays", "via": "via"}
    differ = [
        f"{label} {getattr(ran, name)} (here {getattr(wanted, name)})"
        for name, label in names.items()
        if wanted is not None and getattr(ran, name) != getattr(wanted, name)
    ]
    if wanted is not None and ran.sample_keys != wanted.sample_keys:
        differ.append(f"{len(ran.sample_keys or [])} other samples (here {len(wanted.sample_keys)})")
    source = known.ran_by or "an earlier run"
    st.info(
        f"Shown: the probe {source} ran on this pair in {known.seconds:.0f} s"
        + (
            " (the settings above are not valid: see the red line)."
            if wanted is None
            else " with these settings and samples; nothing to re-run."
            if not differ
            else f". Its settings differ from the ones above: {'; '.join(differ)}. Run the probe to measure them."
        )
    )
    _render(known)
