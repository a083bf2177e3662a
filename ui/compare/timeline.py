"""Aligning two runs by output position and saying in words where they differ (pure functions, no
Streamlit). Every token string is escaped here."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from ui.html import show

# What the timelines draw, and nothing else: the legend is built from these.
KIND_CLASS = {"accepted": "sl-acc", "bonus": "sl-bonus", "prefill": "sl-bonus"}
TIMELINE_LEGEND = (
    ("sl-t sl-acc", "accepted draft token"),
    ("sl-t sl-bonus", "target's own token (the bonus of a verify step, or the first token after the prompt)"),
    ("sl-t sl-step", "a verify step starts (left border)"),
    ("sl-t sl-cur", "first position where the two drafts proposed different tokens (outline)"),
)
LEGEND_CSS = (
    "<style>.sl-legend .sl-t{display:inline-block;padding:1px 6px;margin:0 6px 4px 0;font-size:12px}"
    ".sl-said{font-size:14px;line-height:1.7;margin:6px 0}.sl-said code{background:#fff3e0;"
    "border:1px solid #ffcc80;border-radius:3px;padding:0 4px;white-space:pre}</style>"
)


@dataclass(frozen=True)
class Committed:
    """What a run committed at one position."""

    step: int | None  # the verify step's 0-based index (the pages count from 1); None: the prefill
    kind: str  # accepted | bonus | prefill
    token: int | None  # the committed id
    proposal: int | None = None  # the draft's guess there; None where it drafted none
    proposal_accepted: bool | None = None


def committed_positions(run, steps) -> dict[int, Committed]:
    """Absolute position -> what the run committed there."""
    sequence = list(run.prompt_ids) + list(run.output_ids)
    start = len(run.prompt_ids)
    out = {start: Committed(None, "prefill", sequence[start] if start < len(sequence) else None)}
    for number, step in enumerate(steps):
        for k, token in enumerate(step.committed_ids):
            proposal = step.drafted_ids[k] if k < len(step.drafted_ids) else None
            out[step.position + 1 + k] = Committed(
                number,
                "accepted" if k < step.accepted_count else "bonus",
                token,
                proposal,
                None if proposal is None else k < step.accepted_count,
            )
    return out


def first_divergence(a: dict[int, Committed], b: dict[int, Committed]) -> int | None:
    for position in sorted(set(a) & set(b)):
        pa, pb = a[position].proposal, b[position].proposal
        if pa is not None and pb is not None and pa != pb:
            return position
    return None


def first_output_difference(output_a: list[int], output_b: list[int], lengths: bool = False) -> int | None:
    """The first output index where the two outputs hold different tokens. Where one is a prefix of
    the other: None, or with `lengths` the index where the shorter one ends (they differ there)."""
    for index, (x, y) in enumerate(zip(output_a, output_b, strict=False)):
        if x != y:
            return index
    if lengths and len(output_a) != len(output_b):
        return min(len(output_a), len(output_b))
    return None


def visible(piece: str) -> str:
    """A token piece quoted so that whitespace shows: 'x␣y', '\\n' (plain text, not yet escaped)."""
    return repr(piece).replace(" ", "␣")


def _token(piece: str) -> str:
    return f"<code>{escape(visible(piece))}</code>"


def difference_html(run_a, run_b, positions_a: dict, positions_b: dict, piece_of) -> str:
    """In words: the first position where the drafts proposed different tokens (what each proposed,
    whether it was accepted, the target's token there), then where the outputs themselves differ."""
    start = len(run_a.prompt_ids)
    divergence = first_divergence(positions_a, positions_b)
    said = []
    if divergence is None:
        said.append("The two drafts proposed the same token at every position where both drafted.")
    else:
        a, b = positions_a[divergence], positions_b[divergence]

        def verdict(info: Committed) -> str:
            return "accepted" if info.proposal_accepted else "rejected"

        if a.token == b.token:
            target = f"the target's token there is {_token(piece_of(a.token))}"
        else:
            target = (
                f"the target's token there is {_token(piece_of(a.token))} in A and "
                f"{_token(piece_of(b.token))} in B"
            )
        said.append(
            f"At output position <b>{divergence - start}</b> (sequence position {divergence}; "
            f"verify step {a.step + 1} of A / step {b.step + 1} of B): A's draft proposed "
            f"{_token(piece_of(a.proposal))} ({verdict(a)}), B's draft proposed "
            f"{_token(piece_of(b.proposal))} ({verdict(b)}); {target}."
        )
    output_a, output_b = list(run_a.output_ids), list(run_b.output_ids)
    index = first_output_difference(output_a, output_b)
    if index is not None:
        said.append(
            f"The outputs themselves diverge at output position <b>{index}</b>: A has "
            f"{_token(piece_of(output_a[index]))}, B has {_token(piece_of(output_b[index]))}; "
            "later positions hold different text in each run."
        )
    elif len(output_a) != len(output_b):
        longer = "A" if len(output_a) > len(output_b) else "B"
        said.append(
            f"The outputs agree over their first {min(len(output_a), len(output_b))} tokens; "
            f"{longer} goes on for {abs(len(output_a) - len(output_b))} more."
        )
    else:
        said.append(f"Both runs produced the same {len(output_a)} output tokens.")
    return "".join(f'<div class="sl-said">{sentence}</div>' for sentence in said)


def timeline_legend() -> str:
    items = "".join(f'<span class="{cls}">{escape(name)}</span>' for cls, name in TIMELINE_LEGEND)
    return f'{LEGEND_CSS}<div class="sl-legend">{items}</div>'


def timeline_html(
    run, positions: dict[int, Committed], piece_of, start: int, stop: int, divergence: int | None
) -> str:
    sequence = run.prompt_ids + run.output_ids
    prompt = len(run.prompt_ids)
    spans, last_step = [], None
    for position in range(start, min(stop, len(sequence))):
        info = positions.get(position)
        if info is None:
            continue
        cls = KIND_CLASS[info.kind]
        border = " sl-step" if info.step != last_step else ""
        last_step = info.step
        mark = " sl-cur" if position == divergence else ""
        step = "prefill" if info.step is None else f"verify step {info.step + 1}"
        about = f"output position {position - prompt}  {step}  {info.kind}"
        if info.proposal is not None:
            verdict = "accepted" if info.proposal_accepted else "rejected"
            about += f"  draft proposed {visible(piece_of(info.proposal))} ({verdict})"
        title = escape(about, quote=True)
        spans.append(
            f'<span class="sl-t {cls}{border}{mark}" title="{title}">{show(piece_of(sequence[position]))}</span>'
        )
    return f'<div class="sl-text">{"".join(spans)}</div>'
