"""Tables the pages share (no torch)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui.html import md


def engine_readings(readings, key: str, trained: list[int] | None = None) -> None:
    """How each engine reads the draft (backend/drafts/readings.py) and where they disagree.
    `readings`: the engine table (engine_table.EngineReadings) or preflight's report, which holds it
    (engine_table.PreflightResult). `trained`: the layers a kept wiring probe found when it rejected the
    declared ones; then no line here says the draft is fine as declared."""
    rows = [
        {
            "engine": name,
            "aux HF indices": str(view.aux_hf_indices),
            "feedback": view.feedback,
            "embedding": view.embedding,
            "fc_norm": view.fc_norm,
            "norm before fc": view.norm_before_fc,
            "norm before residual": view.norm_before_residual,
            "norm before lm_head": view.norm_before_lm_head,
            "vocab mapping": view.vocab_mapping,
            "loads": "yes" if view.loads else f"no: {view.refusal}",
            "notes": "; ".join(view.notes),
        }
        for name, view in readings.engines.items()
    ]
    st.dataframe(pd.DataFrame(rows), hide_index=True, key=key)
    if trained:
        st.caption(
            f"The config reads as **{readings.training_engine}** writes it, but the layers it declares are not the "
            f"ones the draft was trained on: the kept wiring probe found HF {trained} (above)."
        )
    else:
        st.caption(f"The draft was most likely trained as **{readings.training_engine}** reads it.")
    for finding in readings.disagreements:
        st.warning(md(finding.message))
    if not readings.disagreements:
        (st.warning if trained else st.success)(
            "The serving engines and the training reading agree on this draft"
            + (": on the declared layers, which the kept wiring probe rejects." if trained else ".")
        )


def _cell(value) -> str:
    """One evidence value on one line: numbers to 4 significant digits, lists and objects compact."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_cell(v) for v in value[:12])
        return f"[{inner}{', ...' if len(value) > 12 else ''}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_cell(v)}" for k, v in list(value.items())[:8]) + "}"
    return str(value)


def evidence_rows(evidence: dict, prefix: str = "") -> list[dict]:
    """A finding's evidence as (field, value) rows: nested objects of scalars become dotted fields."""
    rows = []
    for key, value in evidence.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and all(not isinstance(v, (dict, list)) for v in value.values()):
            rows += evidence_rows(value, f"{name}.")
        else:
            rows.append({"field": name.replace("_", " "), "value": _cell(value)})
    return rows


def evidence_table(evidence: dict) -> None:
    """The evidence as a static table: long values wrap instead of being cut at the column's edge;
    field names in words, not snake_case."""
    if evidence:
        st.table(pd.DataFrame(evidence_rows(evidence)).set_index("field"))


def title(text: str, limit: int = 110) -> str:
    """A collapsed title: the text up to `limit` characters, cut at a word and ended with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0].rstrip(",;:(")
    return cut + "…"
