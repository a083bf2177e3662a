"""Aligning two runs by output position (pure functions, no Streamlit)."""

from __future__ import annotations

from html import escape

from ui.html import show


def committed_positions(run, steps) -> dict[int, dict]:
    """Absolute position -> {step, kind (accepted|bonus|prefill), proposal (the draft's guess there)}."""
    out = {len(run.prompt_ids): {"step": None, "kind": "prefill", "proposal": None}}
    for number, step in enumerate(steps):
        for k, _ in enumerate(step.committed_ids):
            position = step.position + 1 + k
            proposal = step.drafted_ids[k] if k < len(step.drafted_ids) else None
            out[position] = {
                "step": number,
                "kind": "accepted" if k < step.accepted_count else "bonus",
                "proposal": proposal,
            }
    return out


def first_divergence(a: dict[int, dict], b: dict[int, dict]) -> int | None:
    for position in sorted(set(a) & set(b)):
        pa, pb = a[position]["proposal"], b[position]["proposal"]
        if pa is not None and pb is not None and pa != pb:
            return position
    return None


def timeline_html(
    run, positions: dict[int, dict], piece_of, start: int, stop: int, divergence: int | None
) -> str:
    sequence = run.prompt_ids + run.output_ids
    spans, last_step = [], None
    for position in range(start, min(stop, len(sequence))):
        info = positions.get(position)
        if info is None:
            continue
        cls = {"accepted": "sl-acc", "bonus": "sl-bonus", "prefill": "sl-bonus"}[info["kind"]]
        border = " sl-step" if info["step"] != last_step else ""
        last_step = info["step"]
        mark = " sl-cur" if position == divergence else ""
        title = escape(f"pos {position}  step {info['step']}  {info['kind']}", quote=True)
        spans.append(
            f'<span class="sl-t {cls}{border}{mark}" title="{title}">{show(piece_of(sequence[position]))}</span>'
        )
    return f'<div class="sl-text">{"".join(spans)}</div>'
