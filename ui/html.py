"""HTML blocks for token views. Pure functions (no Streamlit): every token string is escaped, and a
window of tokens is ONE block of spans, never one Streamlit element per token."""

from __future__ import annotations

from html import escape

CSS = """
<style>
.sl-text{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px;line-height:1.9;white-space:pre-wrap;
  word-break:break-word;background:#fafafa;border:1px solid #e3e3e3;border-radius:6px;padding:8px 10px}
.sl-t{border-radius:3px;padding:1px 0}
.sl-prompt{color:#555;background:#eceff1}
.sl-resp{background:#e8f5e9}
.sl-mask0{text-decoration:none}
.sl-mask1{border-bottom:2px solid #2e7d32}
.sl-boundary{display:inline-block;background:#37474f;color:#fff;font-size:11px;padding:0 4px;margin:0 3px;
  border-radius:3px}
.sl-acc{background:#c8e6c9}
.sl-bonus{background:#bbdefb}
.sl-rej{background:#ffcdd2}
.sl-nr{background:#eeeeee;color:#9e9e9e}
.sl-step{border-left:2px solid #90a4ae;margin-left:1px}
.sl-cur{outline:2px solid #ff9800;outline-offset:1px}
.sl-chips{display:flex;flex-wrap:wrap;gap:8px;align-items:stretch}
.sl-chip{border-radius:8px;padding:6px 8px;min-width:120px;max-width:220px;font-family:ui-monospace,monospace;
  font-size:12px;border:1px solid #cfd8dc;flex:0 1 220px}
.sl-chip b{font-size:14px}
.sl-chip .sl-meta{color:#455a64;font-size:11px;margin-top:3px;white-space:pre-wrap;word-break:break-word}
.sl-legend span{display:inline-block;padding:1px 6px;margin-right:6px;border-radius:3px;font-size:12px}
</style>
"""

STATUS_CLASS = {"accepted": "sl-acc", "rejected": "sl-rej", "not reached": "sl-nr", "bonus": "sl-bonus"}


def show(piece: str) -> str:
    """A token piece made visible: escaped, with newlines kept and tabs as spaces."""
    return escape(piece.replace("\t", "    "))


def visible(piece: str) -> str:
    """A token piece with its whitespace shown, as the top-5 lists show it: escapes for newlines and
    tabs (repr's), and ␣ for each space, leading ones included."""
    return repr(piece)[1:-1].replace(" ", "\u2423")


def legend() -> str:
    items = "".join(f'<span class="{cls}">{name}</span>' for name, cls in STATUS_CLASS.items())
    return f'<div class="sl-legend">{items}</div>'


def sample_html(input_ids: list[int], loss_mask: list[int], prompt_len: int, pieces: list[str]) -> str:
    """The decoded sample: prompt grey, response green, loss-masked tokens underlined; id and piece
    on hover."""
    spans = []
    for position, (token, mask, piece) in enumerate(zip(input_ids, loss_mask, pieces, strict=True)):
        if position == prompt_len:
            spans.append('<span class="sl-boundary">response &#8594;</span>')
        part = "sl-prompt" if position < prompt_len else "sl-resp"
        title = escape(f"#{position}  id {token}  {piece!r}  loss_mask {mask}", quote=True)
        spans.append(f'<span class="sl-t {part} sl-mask{mask}" title="{title}">{show(piece)}</span>')
    return f'<div class="sl-text">{"".join(spans)}</div>'


def step_statuses(drafted: list[int], accepted: int) -> list[str]:
    return [
        "accepted" if i < accepted else "rejected" if i == accepted else "not reached"
        for i in range(len(drafted))
    ]


def chips_html(step, piece_of) -> str:
    """Drafted tokens as chips (status colour, draft prob, top-5 alternatives, target argmax and its
    prob at the same verify row), then the bonus chip."""
    chips = []
    for i, (token, status) in enumerate(
        zip(step.drafted_ids, step_statuses(step.drafted_ids, step.accepted_count), strict=True)
    ):
        prob = step.draft_probs[i] if i < len(step.draft_probs) else None
        alternatives = ""
        if i < len(step.draft_top_ids):
            alternatives = "\n  ".join(
                f"{visible(piece_of(t))} {p:.2f}"
                for t, p in zip(step.draft_top_ids[i], step.draft_top_probs[i], strict=False)
            )
        argmax = step.target_argmax_ids[i] if i < len(step.target_argmax_ids) else None
        argmax_prob = step.target_argmax_probs[i] if i < len(step.target_argmax_probs) else None
        target_line = (
            ""
            if argmax is None
            else (
                f"target: {visible(piece_of(argmax))}"
                + (f" p={argmax_prob:.2f}" if argmax_prob is not None else "")
            )
        )
        sampled = sampled_decision(step, i)
        if sampled:  # a sampled step: the target's argmax is not the rule, the draw is
            target_line = target_line.replace("target:", "target argmax:") + "\n" + sampled
        meta = (
            f"draft p={prob:.2f}\n" if prob is not None else ""
        ) + f"{target_line}\ntop-5:\n  {alternatives}"
        chips.append(
            f'<div class="sl-chip {STATUS_CLASS[status]}" title="{escape(status, quote=True)}">'
            f"<div>d{i + 1} · {escape(status)}</div><b>{show(visible(piece_of(token)))}</b>"
            f'<div class="sl-meta">{escape(meta)}</div></div>'
        )
    bonus_row = step.accepted_count
    bonus_prob = step.target_argmax_probs[bonus_row] if bonus_row < len(step.target_argmax_probs) else None
    chips.append(
        f'<div class="sl-chip sl-bonus"><div>bonus (target row {bonus_row})</div>'
        f'<b>{show(visible(piece_of(step.bonus_id)))}</b><div class="sl-meta">'
        + (f"target p={bonus_prob:.2f}" if bonus_prob is not None else "")
        + "</div></div>"
    )
    return f'<div class="sl-chips">{"".join(chips)}</div>'


def sampled_decision(step, index: int) -> str | None:
    """In a sampled chain, why draft `index` was accepted or rejected: the engines' rule compares a
    uniform draw u with the target's probability of the drafted token (SGLang's
    TreeSpeculativeSamplingTargetOnly and vLLM's rejection sampler without draft probs: accept when
    u <= p_target(d); the draft's q is not used), so a rejected token can be the target's argmax.
    None for greedy steps and for tree nodes off the chain."""
    tree = step.tree
    if tree is None:
        return None
    draws, accepts, decisions = tree.draws, tree.accept_probs, tree.decisions
    chain = tree.parents == list(range(-1, len(tree.tokens) - 1))
    if not draws or not chain or index >= min(len(draws), len(accepts), len(decisions)):
        return None
    draw, accept, decision = draws[index], accepts[index], decisions[index]
    if draw is None:
        return "sampled: not reached, no draw was made"
    draft = (tree.draft_probs or [None] * (index + 1))[index]
    q = f", draft q={draft:.3f} (not used by the rule)" if draft is not None else ""
    why = "u <= p" if decision == "accepted" else "u > p"
    return f"sampled: accept prob p={accept:.3f}{q}, draw u={draw:.3f} -> {decision} ({why})"


def output_html(first_token: int | None, steps, piece_of, current: int, window: int = 40) -> str:
    """The output as one coloured text: per step its accepted drafts (green) then its bonus (blue),
    a left border at each step start, the current step outlined. Only steps within `window` of the
    current one are rendered (the rest is summarised), so a 2,000-token run stays one small block."""
    start, stop = max(0, current - window), min(len(steps), current + window + 1)
    parts = []
    if start > 0:
        parts.append(f'<span class="sl-boundary">… {start} earlier steps</span>')
    elif first_token is not None:
        parts.append(
            f'<span class="sl-t sl-bonus" title="prefill: the target\'s own first token">'
            f"{show(piece_of(first_token))}</span>"
        )
    for number in range(start, stop):
        step = steps[number]
        tokens = []
        for k, token in enumerate(step.committed_ids):
            cls = "sl-acc" if k < step.accepted_count else "sl-bonus"
            # 1-based as the viewer's "Step N of M" and Compare's timelines
            title = escape(f"step {number + 1}  pos {step.position + 1 + k}  id {token}", quote=True)
            tokens.append(f'<span class="sl-t {cls}" title="{title}">{show(piece_of(token))}</span>')
        outline = " sl-cur" if number == current else ""
        parts.append(
            f'<span class="sl-step{outline}" id="step-{number}" data-step="{number}">{"".join(tokens)}</span>'
        )
    if stop < len(steps):
        parts.append(f'<span class="sl-boundary">{len(steps) - stop} later steps …</span>')
    return f'<div class="sl-text">{"".join(parts)}</div>'


def context_html(ids: list[int], piece_of, limit: int = 60) -> str:
    tail = ids[-limit:]
    spans = "".join(f'<span class="sl-t sl-prompt">{show(piece_of(t))}</span>' for t in tail)
    more = f'<span class="sl-boundary">… {len(ids) - limit} earlier</span>' if len(ids) > limit else ""
    return f'<div class="sl-text">{more}{spans}</div>'


def mismatch_html(input_ids: list[int], rows: list, piece_of) -> str:
    """Tokens coloured by their worst chunk (`rows`: ChunkRow): red where any chunk mismatches, green
    where all agree; hover shows each chunk's cosine and norm ratio."""
    by_position: dict[int, list] = {}
    for row in rows:
        by_position.setdefault(row.position, []).append(row)
    spans = []
    for position, token in enumerate(input_ids):
        mine = by_position.get(position, [])
        bad = any(r.mismatched for r in mine)
        detail = "; ".join(f"{r.chunk}: cos {r.cosine:.3f}, ratio {r.norm_ratio:.2f}" for r in mine)
        title = escape(f"#{position} id {token}  {detail}", quote=True)
        cls = "sl-rej" if bad else "sl-acc"
        spans.append(f'<span class="sl-t {cls}" title="{title}">{show(piece_of(token))}</span>')
    return f'<div class="sl-text">{"".join(spans)}</div>'


MARKDOWN_SPECIALS = set("\\`*_{}[]()#+-.!|<>~$&:")


def md(text) -> str:
    """A user-controlled string made inert in Streamlit Markdown (captions, messages): every
    Markdown, HTML and math character is backslash-escaped, so a backtick cannot end a code span
    and `[phish](https://…)` stays text; bare URLs and e-mail addresses are not linked."""
    text = str(text).replace("://", ":\u200b//").replace("www.", "www\u200b.").replace("@", "@\u200b")
    # (a zero-width space breaks GitHub-flavoured autolinks, which escaping alone does not stop)
    return "".join("\\" + c if c in MARKDOWN_SPECIALS else c for c in text).replace("\n", " ")
