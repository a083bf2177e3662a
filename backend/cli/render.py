"""What the CLI prints beside its JSON: progress bars on stderr and numbers as text."""

from __future__ import annotations

import sys

from backend.diagnostics.threshold_whatif import best


def progress_bar(total: int, description: str, unit: str = "tok"):
    from tqdm import tqdm

    return tqdm(total=total, desc=description, file=sys.stderr, unit=unit, leave=False)


def percent_bar(description: str):
    """(bar, progress): a stderr bar in percent and the `progress(fraction, message)` that moves it."""
    bar = progress_bar(100, description, unit="%")

    def progress(fraction: float, message: str) -> None:
        bar.set_postfix_str(message[-60:], refresh=fraction >= 1)  # the last word is always drawn
        bar.update(round(100 * fraction) - bar.n)

    return bar, progress


def fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def ci_text(interval) -> str:
    """' (95% CI [a, b] over requests)' when there is one."""
    return "" if not interval else f" (95% CI [{interval[0]:.2f}, {interval[1]:.2f}] over requests)"


def _interval(bounds) -> str:
    return "" if not bounds else f"[{bounds[0]:.2f}, {bounds[1]:.2f}]"


def _rate(group) -> str:
    if group.rate is None:
        return f"{group.attempts} attempts: too few to judge"
    return f"{group.rate:.3f} {_interval(group.ci95)}"


def where_lost_text(found) -> str:
    """`lost`'s tables, one block per draft (backend/diagnostics/where_lost.py; each term defined in
    its DEFINITIONS, printed by --json)."""
    lines = []
    for d in found.drafts:
        lines.append(f"== {d.name}: {d.runs} runs, {d.verify_steps} verify steps, {d.attempts} attempts")
        lines.append("  position  P(a>=i) pooled  mean over samples [95% CI]  P(a>=i | a>=i-1)  steps")
        for p in d.by_position:
            lines.append(
                f"  {p.position:>8}  {fmt(p.marginal):>14}  {fmt(p.marginal_mean):>8} {_interval(p.marginal_ci95):<18}"
                f"  {fmt(p.conditional):>16}  {p.steps}"
            )
        for title, groups in (
            ("token kind (the target's token)", d.by_kind),
            ("target entropy", d.by_entropy),
            ("target confidence", d.by_confidence),
            ("context length", d.by_context),
            ("source", d.by_source),
            ("span", d.by_span),
            ("block (code vs prose)", d.by_block),
        ):
            if groups:
                lines.append(f"  by {title}: group, share of attempts, acceptance [95% CI], samples")
                lines += [
                    f"    {g.group:<26} {g.share:>6.1%}  {_rate(g)}  ({g.samples} samples)" for g in groups
                ]
        if d.top_rejected:
            lines.append(
                "  top rejected (what the target emitted instead): "
                + ", ".join(f"{t.text!r} x{t.rejections}" for t in d.top_rejected[:8])
            )
        overall = d.calibration[0]
        lines.append(
            f"  calibration: ECE {fmt(overall.ece)}, Brier {fmt(overall.brier)}, AUROC {fmt(overall.auroc)} over "
            f"{overall.attempts} attempts; ECE per position "
            + ", ".join(f"{c.position}: {fmt(c.ece)}" for c in d.calibration[1:])
        )
        lines.append("  threshold what-if (assumptions: see definitions.threshold_whatif in --json):")
        for t in d.threshold_whatif:
            name = "as run" if t.threshold is None else f"p < {t.threshold:.1f}"
            lines.append(
                f"    {name:<8} accept length {fmt(t.accept_length)}  drafts/step {fmt(t.drafts_per_step)}"
                f"  wasted drafts {t.wasted_drafts}  accepted lost {t.accepted_lost}"
                f"  speed-up {fmt(t.speedup)}"
            )
        top = best(d.threshold_whatif)
        if top is not None:
            name = "as run" if top.threshold is None else f"p < {top.threshold:.1f}"
            lines.append(f"    best by predicted speed-up: {name} ({fmt(top.speedup)})")
        lines += [f"  note: {n}" for n in d.notes]
    return "\n".join(lines)
