"""A comparison batch: its summary (a dataclass, pure), the sentence saying which draft is better,
and the table whose rows open their pair of runs."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import streamlit as st

from backend.run.metrics import mean_ci95, t975
from backend.service.tasks import CompareResult, CompareRow
from ui import state
from ui.html import md
from ui.runs import ACCEPT_LENGTH_HELP

TIE = 1e-9


@dataclass(frozen=True)
class BatchSummary:
    """Over the samples where both runs have an accept length: each side's mean accept length (the
    mean over samples of each run's own mean), the mean delta B - A, and who won how often."""

    samples: int
    mean_a: float | None
    mean_b: float | None
    mean_delta: float | None
    delta_ci95: list[float] | None  # the mean delta's 95% interval over samples (paired)
    wins_a: int
    wins_b: int
    ties: int
    without_accept_length: int  # samples left out: a side had no verify step
    delta_sd: float | None = None  # the spread of the per-sample deltas (sample standard deviation)

    def samples_to_settle(self) -> int | None:
        """The fewest samples (more than these) whose 95% interval excludes 0 if the mean delta and its
        spread hold: |delta| / (sd / sqrt(n)) >= t at n - 1 degrees of freedom, the t the interval uses
        (not the large-sample (2 sd / delta)^2, which said 4 where the interval needs 7). None
        without a spread."""
        if not self.delta_sd or not self.mean_delta:
            return None
        ratio = abs(self.mean_delta) / self.delta_sd
        for n in range(max(2, self.samples + 1), 122):  # within the table: t shrinks as n grows
            if ratio * math.sqrt(n) >= t975(n - 1):
                return n
        return max(self.samples + 1, 122, math.ceil((t975(121) / ratio) ** 2))  # t constant past the table

    def mean(self, side: str) -> float | None:
        return self.mean_a if side == "A" else self.mean_b

    def wins(self, side: str) -> int:
        return self.wins_a if side == "A" else self.wins_b


def batch_summary(rows: list[CompareRow]) -> BatchSummary:
    pairs = [(r.al_a, r.al_b) for r in rows if r.al_a is not None and r.al_b is not None]
    n = len(pairs)
    deltas = [b - a for a, b in pairs]
    return BatchSummary(
        samples=n,
        mean_a=sum(a for a, _ in pairs) / n if n else None,
        mean_b=sum(b for _, b in pairs) / n if n else None,
        mean_delta=sum(deltas) / n if n else None,
        delta_ci95=mean_ci95(deltas),
        wins_a=sum(d < -TIE for d in deltas),
        wins_b=sum(d > TIE for d in deltas),
        ties=sum(abs(d) <= TIE for d in deltas),
        without_accept_length=len(rows) - n,
        delta_sd=statistics.stdev(deltas) if n > 1 else None,
    )


def batch_sentence(summary: BatchSummary, name_a: str, name_b: str) -> str:
    """Which draft is better on the batch, in words, with the numbers behind it."""
    n = summary.samples
    if not n:
        return "No sample has an accept length on both sides: nothing to compare."
    delta = summary.mean_delta
    if abs(delta) < TIE and summary.wins_a == summary.wins_b:
        return f"{name_a} (A) and {name_b} (B) do equally well on these {n} samples."
    better, worse = ("B", "A") if delta > 0 else ("A", "B")
    names = {"A": name_a, "B": name_b}
    ci = summary.delta_ci95
    if n == 1:  # no spread to judge by: the sample's numbers, and that they settle nothing
        return (
            f"{names[better]} ({better}) is higher on this one sample: accept length {summary.mean(better):.2f} vs "
            f"{summary.mean(worse):.2f} (B - A {delta:+.2f}). One sample settles nothing: accept length varies "
            "about +-50% between prompts; compare a batch of samples to tell the drafts apart."
        )
    if ci is not None and ci[0] <= 0 <= ci[1]:
        settle = summary.samples_to_settle()
        return (
            f"{names[better]} ({better}) is higher on {summary.wins(better)} of {n} samples (lower on "
            f"{summary.wins(worse)}), but {n} samples cannot settle it: the mean delta B - A {delta:+.2f} has a "
            f"95% interval over samples of [{ci[0]:+.2f}, {ci[1]:+.2f}], which includes 0 (with few samples "
            "the interval is wide)."
            + (f" About {settle} samples would settle a delta this size at this spread." if settle else "")
        )
    return (
        f"{names[better]} ({better}) is better on these {n} samples: mean accept length "
        f"{summary.mean(better):.2f} vs {summary.mean(worse):.2f} (B - A {delta:+.2f}"
        + (f", 95% interval [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci is not None else "")
        + f"), higher on {summary.wins(better)} of {n} samples"
        + (f", lower on {summary.wins(worse)}" if summary.wins(worse) else "")
        + "."
    )


def _metrics(summary: BatchSummary, drafts: dict, settings: dict) -> None:
    cells = st.columns(5)
    cells[0].metric("Mean AL A", f"{summary.mean_a:.2f}", help=ACCEPT_LENGTH_HELP)
    cells[1].metric("Mean AL B", f"{summary.mean_b:.2f}", help=ACCEPT_LENGTH_HELP)
    cells[2].metric("Mean delta (B - A)", f"{summary.mean_delta:+.2f}")
    cells[3].metric("Wins A / B / ties", f"{summary.wins_a} / {summary.wins_b} / {summary.ties}")
    cells[4].metric("Samples", summary.samples)
    st.markdown("**" + md(batch_sentence(summary, *side_names(drafts, settings))) + "**")


def side_names(drafts: dict, settings: dict) -> tuple[str, str]:
    """How the sentence names each side: its draft, with what it ran with ("final K=4") when the two
    sides ran with different settings (a chain against a tree, EAGLE-3 at K 4 against DFlash at K 7)."""
    names = [state.draft_name(drafts.get(side, side)) for side in ("A", "B")]
    shapes = [
        settings.get(side, "").removeprefix(Path(drafts.get(side, "")).name).strip() for side in ("A", "B")
    ]
    if shapes[0] == shapes[1]:
        return names[0], names[1]
    return tuple(f"{name} ({shape})" if shape else name for name, shape in zip(names, shapes, strict=True))


def show_batch(task_id: str | None, result: CompareResult) -> None:
    """The batch's summary and table (`task_id`: the task that made it); a clicked row makes its pair
    the shared choice."""
    st.subheader("Samples where the drafts differ most")
    summary = batch_summary(result.rows)
    if summary.samples:
        _metrics(summary, result.drafts, result.settings)
    left_out = summary.without_accept_length
    st.caption(
        f"Over {summary.samples} sample(s): the mean of each run's accept length ({ACCEPT_LENGTH_HELP}); "
        "a win is a sample where that draft's accept length is higher. "
        + (f"{left_out} sample(s) without an accept length are left out. " if left_out else "")
        + f"{result.reused} run(s) reused (finished runs of the same draft, sample and settings), "
        f"{result.replayed} replayed."
    )
    table = pd.DataFrame([row.to_dict() for row in result.rows])
    table_key = f"compare_table_{task_id}"  # a new batch starts with no row ticked
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
