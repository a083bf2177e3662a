"""Was a dataset tokenized by this target's tokenizer? Token ids carry no tokenizer name: a dataset
made for another model can hold only ids the target accepts and still decode to gibberish (the toy's
2,048-token ids read by SmolLM2's 49,152-token tokenizer). Three readings, each on the first samples:

- vocabulary: ids the target does not have (the import refuses those records), and ids that use only
  the bottom of a much larger vocabulary (a dataset made with a smaller tokenizer);
- special ids: every sample opening with one id the target does not reserve, varied text after it
  (another tokenizer's BOS),
  or the target's own BOS, which its tokenizer adds, opening none;
- round trip: decode the ids with the target's tokenizer and encode the text again; ids made by this
  tokenizer come back (almost) as they were, another tokenizer's do not. Measured (difflib ratio of the
  ids, mean over samples): 0.994 and 1.000 for the toy's and SmolLM2's own eval sets, 0.78 for the toy's
  ids under a shuffled vocabulary, 0.90 for the toy's ids read by SmolLM2 (short, common pieces come
  back; the span reading flags that one), hence the 0.95 floor.

A flag is a sentence naming the evidence; no flag means the readings agree with this tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from difflib import SequenceMatcher

from backend.plain import KEY, Plain

SAMPLES = 16  # the first samples read
TOKENS = 512  # per sample, for the round trip
ROUND_TRIP_FLOOR = 0.95  # mean re-encode agreement under which the ids are another tokenizer's
SPAN_FLOOR = 0.25  # ids all below this share of the vocabulary, over enough tokens, are suspicious
SPAN_MIN_TOKENS = 2000
SAME_START = 0.8


@dataclass(frozen=True)
class TokenizerFit(Plain):
    DERIVED = ("fits",)

    flags: list[str] = field(default_factory=list)
    # mean difflib ratio of decode-then-encode against the ids, 0..1
    round_trip: float | None = field(default=None, metadata={KEY: "round_trip_agreement"})
    exact_round_trips: int = 0
    samples_read: int = 0
    max_id: int | None = None
    vocab_size: int | None = None

    @property
    def fits(self) -> bool:
        return not self.flags


def _vocabulary_flags(ids: list[list[int]], vocab_size: int) -> list[str]:
    tokens = sum(len(s) for s in ids)
    top = max((max(s) for s in ids if s), default=-1)
    flags = []
    if top >= vocab_size:
        flags.append(f"ids up to {top}, past the target's vocabulary of {vocab_size:,}")
    elif tokens >= SPAN_MIN_TOKENS and top < SPAN_FLOOR * vocab_size:
        flags.append(
            f"ids span only 0..{top} of the target's {vocab_size:,}-token vocabulary over {tokens:,} tokens "
            f"({(top + 1) / vocab_size:.0%}): made with a smaller tokenizer?"
        )
    return flags


def _special_flags(ids: list[list[int]], tokenizer) -> list[str]:
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    starts = [s[0] for s in ids if s]
    flags = []
    if len(starts) >= 4:
        first = max(set(starts), key=starts.count)
        share = starts.count(first) / len(starts)
        # A BOS is one id before varied text; a shared opening phrase ("Complete the ...") repeats on.
        seconds = [s[1] for s in ids if len(s) > 1 and s[0] == first]
        varied = bool(seconds) and max(seconds.count(x) for x in set(seconds)) / len(seconds) < SAME_START
        if share >= SAME_START and varied and first not in special:
            piece = tokenizer.convert_ids_to_tokens(first) if first < len(tokenizer) else "?"
            flags.append(
                f"{share:.0%} of samples open with id {first} ({piece!r} here), which this tokenizer does not "
                "reserve: another tokenizer's BOS?"
            )
    bos = getattr(tokenizer, "bos_token_id", None)
    try:
        adds_bos = bos is not None and tokenizer("a")["input_ids"][:1] == [bos]
    except Exception:  # noqa: BLE001 - a tokenizer that cannot encode has no BOS reading
        adds_bos = False
    if adds_bos and starts and bos not in starts:
        flags.append(f"this tokenizer opens every text with its BOS (id {bos}) and no sample does")
    return flags


def _round_trip(ids: list[list[int]], tokenizer) -> tuple[float | None, int]:
    ratios, exact = [], 0
    for sample in ids:
        head = sample[:TOKENS]
        if not head or max(head) >= len(tokenizer):
            continue
        try:
            again = tokenizer(tokenizer.decode(head), add_special_tokens=False)["input_ids"]
        except Exception:  # noqa: BLE001 - a tokenizer that cannot decode these ids gives no reading
            continue
        exact += again == head
        ratios.append(SequenceMatcher(None, head, again, autojunk=False).ratio())
    return (sum(ratios) / len(ratios) if ratios else None), exact


def tokenizer_fit(samples: list, tokenizer, vocab_size: int) -> TokenizerFit:
    """The three readings on the first samples (objects with `input_ids`)."""
    ids = [list(s.input_ids) for s in samples[:SAMPLES]]
    flags = _vocabulary_flags(ids, vocab_size)
    agreement, exact = (None, 0)
    if tokenizer is not None:
        flags += _special_flags(ids, tokenizer)
        agreement, exact = _round_trip(ids, tokenizer)
        if agreement is not None and agreement < ROUND_TRIP_FLOOR:
            flags.append(
                f"decoded by this tokenizer and encoded again, the ids agree {agreement:.0%} "
                f"({exact} of {len(ids)} samples exactly): they were made by another tokenizer"
            )
    return TokenizerFit(
        flags,
        None if agreement is None else round(agreement, 3),
        exact,
        len(ids),
        max((max(s) for s in ids if s), default=None),
        vocab_size,
    )
