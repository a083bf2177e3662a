"""A chat conversation rendered with the target's chat template: token ids, and a loss mask of 1 on
the tokens each assistant turn adds (the reply and the template's end of turn).

The exact definition is prefix by prefix: an assistant turn k covers the characters between the first
k messages rendered with a generation prompt and the first k + 1 rendered. Rendering every prefix is
quadratic in the turns (each render walks the whole prefix), so the layout is found in linear time
where the template allows it (`_layout_fast`) and the exact per-prefix layout decides otherwise:

1. the conversation's roles, with a placeholder for each content, are rendered prefix by prefix up to
   the first repeat of every role (a handful of messages): that gives each role's wrapping (the text
   before and after its content) and the generation prompt;
2. the real conversation is rendered once, and must equal the wrappings filled with its contents
   (verbatim, or trimmed as templates that `| trim` do), character for character;
3. the last assistant turn is rendered exactly and must land where the layout says.

Any doubt (a template whose wrapping depends on the position or the content, a probe it refuses)
falls back to the exact layout, and a tokenizer that is neither additive across turns nor gives
offsets falls back to tokenizing every prefix whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.data.samples import Sample

PLACEHOLDER = "\ue000{}\ue001"  # private-use characters: no template or text has them by chance
CALIBRATION_LIMIT = 64  # a role first repeating later than this: the exact layout decides


@dataclass(frozen=True)
class Layout:
    """Where each message's rendering ends in `text`, and where each assistant reply starts."""

    text: str
    ends: list[int]  # ends[k]: the length of the first k + 1 messages rendered
    heads: dict[int, int]  # assistant message k: the length of the first k rendered + generation prompt

    def start(self, k: int) -> int:
        return self.ends[k - 1] if k else 0


def render_conversation(tokenizer, messages: list[dict], line: int, source: str) -> Sample:
    """Token ids of the whole conversation; loss_mask 1 on the tokens each assistant turn adds.

    A conversation with no assistant turn is a prompt: rendered once, with the generation prompt."""
    if not any(message["role"] == "assistant" for message in messages):
        return _prompt(tokenizer, messages, line, source)
    layout = _layout(tokenizer, messages)
    if layout is not None:
        sample = _by_pieces(tokenizer, layout, messages, line, source) or _by_offsets(
            tokenizer, layout, line, source
        )
        if sample is not None:
            return sample
    return _render_by_prefixes(tokenizer, messages, line, source)


def _prompt(tokenizer, messages: list[dict], line: int, source: str) -> Sample:
    input_ids = _tokens(tokenizer, _text_of(tokenizer, messages, len(messages), generation_prompt=True))
    if not input_ids:
        raise ValueError("the conversation renders to no tokens")
    text = _text_of(tokenizer, messages, len(messages))
    return Sample(input_ids, [0] * len(input_ids), len(input_ids), source, line, {"text": text[:20000]})


def _text_of(tokenizer, messages: list[dict], upto: int, generation_prompt: bool = False) -> str:
    if upto == 0:
        return ""
    return tokenizer.apply_chat_template(
        messages[:upto], tokenize=False, add_generation_prompt=generation_prompt
    )


def _layout(tokenizer, messages: list[dict]) -> Layout | None:
    """None when the prefixes of the conversation do not render as prefixes of its text."""
    return _layout_fast(tokenizer, messages) or _layout_exact(tokenizer, messages)


def _layout_exact(tokenizer, messages: list[dict]) -> Layout | None:
    """Every prefix rendered (quadratic; exact for any template)."""
    ends: list[int] = []
    heads: dict[int, int] = {}
    previous = ""
    for k, message in enumerate(messages):
        current = _text_of(tokenizer, messages, k + 1)
        if message["role"] == "assistant":
            head = _text_of(tokenizer, messages, k, generation_prompt=True)
            if not (head.startswith(previous) and current.startswith(head)):
                return None
            heads[k] = len(head)
        elif not current.startswith(previous):
            return None
        ends.append(len(current))
        previous = current
    return Layout(previous, ends, heads)


def _layout_fast(tokenizer, messages: list[dict]) -> Layout | None:
    roles = [message["role"] for message in messages]
    firsts: dict[str, int] = {}
    for k in range(1, len(roles)):
        firsts.setdefault(roles[k], k)
    calibrate = max(firsts.values(), default=0) + 1
    if calibrate > CALIBRATION_LIMIT or "assistant" not in firsts:
        return None
    probe = [{"role": role, "content": PLACEHOLDER.format(k)} for k, role in enumerate(roles[:calibrate])]
    try:  # the probe is ours: a template that refuses it leaves the decision to the exact layout
        calibration = _layout_exact(tokenizer, probe)
        whole = _text_of(tokenizer, messages, len(messages))
    except Exception:  # noqa: BLE001 - any refusal means "not this way"; the exact layout reports
        return None
    if calibration is None:
        return None
    wraps = _wrappings(calibration, roles[:calibrate])
    if wraps is None:
        return None
    first, by_role, reply_at = wraps
    for trim in (False, True):
        layout = _filled(messages, first, by_role, reply_at, trim)
        if layout is not None and layout.text == whole:
            return layout if _last_turn_agrees(tokenizer, messages, layout) else None
    return None


def _wrappings(calibration: Layout, roles: list[str]):
    """Message 0's wrapping, each role's wrapping (equal at every calibrated position), and where an
    assistant reply starts within its wrapping's head (the generation prompt's length)."""
    by_role: dict[str, tuple[str, str]] = {}
    first = None
    reply_at = None
    for k, role in enumerate(roles):
        segment = calibration.text[calibration.start(k) : calibration.ends[k]]
        before, found, after = segment.partition(PLACEHOLDER.format(k))
        if not found or PLACEHOLDER.format(k) in after:
            return None  # the content is not rendered once, verbatim
        if k == 0:
            first = (before, after)
            continue
        if by_role.setdefault(role, (before, after)) != (before, after):
            return None
        if role == "assistant":
            at = calibration.heads[k] - calibration.start(k)
            if reply_at is None:
                reply_at = at
            if at != reply_at or at > len(before):
                return None
    return first, by_role, reply_at


def _filled(messages, first, by_role, reply_at, trim: bool) -> Layout | None:
    pieces: list[str] = []
    ends: list[int] = []
    heads: dict[int, int] = {}
    at = 0
    for k, message in enumerate(messages):
        before, after = first if k == 0 else by_role[message["role"]]
        content = message["content"].strip() if trim else message["content"]
        if message["role"] == "assistant":
            heads[k] = at + reply_at
        piece = before + content + after
        pieces.append(piece)
        at += len(piece)
        ends.append(at)
    return Layout("".join(pieces), ends, heads)


def _last_turn_agrees(tokenizer, messages: list[dict], layout: Layout) -> bool:
    """The last assistant turn rendered exactly lands where the layout says (two renders)."""
    k = max(layout.heads)
    head = _text_of(tokenizer, messages, k, generation_prompt=True)
    current = _text_of(tokenizer, messages, k + 1)
    return (
        (len(head), len(current)) == (layout.heads[k], layout.ends[k])
        and layout.text.startswith(current)
        and current.startswith(head)
    )


def _tokens(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def _by_pieces(tokenizer, layout: Layout, messages: list[dict], line: int, source: str) -> Sample | None:
    """Each message's new text tokenized once, the pieces checked against one tokenization of the
    whole; None where the tokenizer is not additive across the pieces (a merge at a boundary)."""
    input_ids: list[int] = []
    loss_mask: list[int] = []
    prompt_len = None
    for k, message in enumerate(messages):
        if message["role"] == "assistant":
            pieces = [(layout.start(k), layout.heads[k], 0), (layout.heads[k], layout.ends[k], 1)]
        else:
            pieces = [(layout.start(k), layout.ends[k], 0)]
        for start, stop, masked in pieces:
            if masked and prompt_len is None:
                prompt_len = len(input_ids)
            piece = _tokens(tokenizer, layout.text[start:stop])
            input_ids += piece
            loss_mask += [masked] * len(piece)
    if input_ids != _tokens(tokenizer, layout.text):
        return None
    if not input_ids or not prompt_len:
        raise ValueError("the conversation renders to no tokens")
    return Sample(input_ids, loss_mask, prompt_len, source, line, {"text": layout.text[:20000]})


def _by_offsets(tokenizer, layout: Layout, line: int, source: str) -> Sample | None:
    """The whole text tokenized once; the tokens overlapping an assistant span masked (as SpecForge
    finds assistant spans). A reply that starts with a newline or indentation merges with the
    template's newline into one token: that token belongs to the reply. None when the tokenizer gives
    no offsets."""
    spans = [(layout.heads[k], layout.ends[k]) for k in sorted(layout.heads)]
    try:
        encoded = tokenizer(layout.text, add_special_tokens=False, return_offsets_mapping=True)
    except (NotImplementedError, ValueError, TypeError):
        return None
    offsets = encoded.get("offset_mapping")
    if not offsets:
        return None
    input_ids = list(encoded["input_ids"])
    loss_mask = [int(any(start < stop and end > first for first, stop in spans)) for start, end in offsets]
    prompt_len = next((i for i, m in enumerate(loss_mask) if m), len(input_ids))
    if prompt_len == 0 or not any(loss_mask):
        return None
    return Sample(input_ids, loss_mask, prompt_len, source, line, {"text": layout.text[:20000]})


def _render_by_prefixes(tokenizer, messages: list[dict], line: int, source: str) -> Sample:
    """Every prefix rendered and tokenized whole (quadratic; exact for any template and tokenizer)."""

    def ids_of(upto: int, generation_prompt: bool = False) -> list[int]:
        return _tokens(tokenizer, _text_of(tokenizer, messages, upto, generation_prompt))

    input_ids: list[int] = []
    loss_mask: list[int] = []
    prompt_len = None
    for upto in range(1, len(messages) + 1):
        if messages[upto - 1]["role"] == "assistant":
            head = ids_of(upto - 1, generation_prompt=True)
            if prompt_len is None:
                prompt_len = len(head)
            full = ids_of(upto)
            if full[: len(head)] != head:
                raise ValueError(
                    f"turn {upto - 1}: the chat template renders this conversation differently once the "
                    "assistant's reply is added (the reply changes the tokens before it), so the reply's "
                    "tokens cannot be told from the prompt's; check the template with this conversation"
                )
            loss_mask += [0] * (len(head) - len(input_ids)) + [1] * (len(full) - len(head))
        else:
            full = ids_of(upto)
            loss_mask += [0] * (len(full) - len(input_ids))
        input_ids = full
    if not input_ids or not prompt_len:
        raise ValueError("the conversation renders to no tokens")
    text = _text_of(tokenizer, messages, len(messages))
    return Sample(input_ids, loss_mask, prompt_len, source, line, {"text": text[:20000]})


def user_prompt_ids(tokenizer, text: str) -> list[int]:
    """A typed prompt as a chat server receives it: one user message rendered with the target's chat
    template and its generation prompt (the assistant's header), tokenized without added specials (the
    template writes them). BadInput when the tokenizer has no template."""
    from backend import BadInput

    if not getattr(tokenizer, "chat_template", None):
        where = getattr(tokenizer, "name_or_path", "") or "the target"
        raise BadInput(f"{where}: its tokenizer has no chat template; send the prompt raw")
    return _tokens(
        tokenizer, _text_of(tokenizer, [{"role": "user", "content": text}], 1, generation_prompt=True)
    )
