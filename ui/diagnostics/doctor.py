"""The checkpoint doctor tab: preflight with the resolved wiring, vocab coverage, a d2t comparison."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from backend.service import kept_results, tasks
from ui import state
from ui.diagnostics.common import stale_note
from ui.html import md
from ui.pickers import first_samples
from ui.tables import engine_readings as engine_table
from ui.taskview import task_panel


def _render(result) -> None:
    """`result`: the doctor's answer (backend/diagnostics/doctor.py DoctorResult)."""
    report = result.preflight
    stale = stale_note(result)
    if stale:
        st.caption(stale)
    st.markdown(
        f"Preflight: **{'passed' if report.ok else 'FAILED'}** · declared aux HF indices "
        f"{report.aux_hf_indices} ({md(report.wiring_source)})"
    )
    trained = _probe_answer(result)
    st.dataframe(pd.DataFrame(checks_shown(report.checks, trained)), hide_index=True, key="doctor_checks")
    if report.engines:
        st.markdown("**How each engine reads this draft**")
        engine_table(report, key="doctor_engines", trained=trained)
    cover = result.coverage
    if cover is not None:
        left, right = st.columns(2)
        left.metric("Vocab coverage, all tokens", f"{cover.all_tokens:.1%}", help=cover.definition)
        right.metric(
            "Vocab coverage, loss-masked tokens",
            f"{(cover.loss_masked_tokens or 0):.1%}",
            help=cover.definition,
        )
    comparison = result.mapping_comparison
    if comparison is not None:
        (st.warning if comparison.regenerated else st.info)(comparison.message)


def checks_shown(checks, trained: list[int] | None) -> list[dict]:
    """Preflight's checks as the table shows them: its wiring check says only that the declared indices
    exist in the target, so under a kept probe that rejects them it does not read "pass"."""
    rows = [c.to_dict() for c in checks]
    for row in rows:
        if trained and row["name"] == "wiring" and row["status"] == "pass":
            row["status"] = "rejected by the kept probe"
            row["message"] = (
                f"{row['message']}; the kept wiring probe found the draft trained on HF {trained}"
            )
    return rows


def _probe_answer(result) -> list[int] | None:
    """The wiring a kept probe found, beside preflight's wiring check (without it the doctor said
    "wiring: pass" while the lint on the same page used a probe that rejected it); the probe's best when
    it rejected the declared wiring, else None."""
    found = kept_results.trained_wirings(result.target, result.draft, state.db())
    declared = list(result.preflight.aux_hf_indices)
    if not found or found[0] == declared:
        return None
    others = [w for w in found[1:] if w != declared]
    st.error(
        f"Wiring: the kept wiring probe rejects the declared HF {declared}: the draft was trained on HF "
        f"{found[0]}"
        + (f" (or {', '.join(f'HF {w}' for w in others)}: not told apart on its samples)" if others else "")
        + ". Preflight's wiring check below says only that the declared indices exist in the target."
    )
    return found[0]


def doctor_tab() -> None:
    st.markdown(
        "The preflight report with the resolved wiring, the share of a dataset's tokens the draft vocab can "
        "reach, and a d2t comparison with a second draft (a regenerated mapping is flagged). The verdict is "
        "the one at the top of this page."
    )
    samples = first_samples("doctor", default_n=48)
    if state.draft_is_dflash():
        st.info(
            "A DFlash draft proposes from the target's own embeddings and head: every target token is "
            "reachable and there is no d2t mapping to compare. Its fields (block size, target layers, mask "
            "id, rope_theta) are the preflight's checks below; which layers it was trained on, the Wiring "
            "probe tab's question."
        )
        other = "(none)"
    else:
        others = ["(none)"] + [n for n, p in state.drafts().items() if p != state.draft_path()]
        other = st.selectbox("Compare d2t with", others, key="doctor_other")
    if st.button("Run the doctor", key="doctor_run", disabled=samples is None):
        st.session_state["doctor_task"] = tasks.start_doctor(
            state.target_path(), state.draft_path(), samples, state.drafts().get(other)
        )
    task_panel("doctor_task", _render, adopt="doctor")
