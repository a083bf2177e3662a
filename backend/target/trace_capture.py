"""A trace (trace.py) computed by the target loaded here: the prompt's prefill, then the target's plain
greedy continuation (what a replay's output must equal), capturing at each position the states at the
HF indices asked and what a greedy verify reads of its logits row. End-of-generation ids do not stop it:
a replay decides where it stops, and its last verify step may draft past an EOS; the continuation ends
where every replay it is for stops reading (`trace.tokens_read`).

A guess (a continuation believed to be the target's: the sample's own answer when the samples file holds
the target's answers, as SpecForge's regenerated training data does; a kept trace's continuation) is
verified as a speculative step verifies drafts: fed after the last token in one forward, its tokens
kept while each equals the argmax of the row before it, and the row after the last kept one gives the
next token. So a right guess costs one prefill-like forward instead of a forward per token, a wrong one
is cut at its first wrong token (chunks start at GUESS_CHUNK tokens and double while every token
holds), and the continuation is the target's own either way."""

from __future__ import annotations

import torch

from backend.target.target_runner import row_stats
from backend.target.trace import TOP, Trace, tokens_read

GUESS_CHUNK = 16  # the first chunk of a guess verified; doubled after a chunk that held throughout


class _Decode:
    """One prompt's continuation while it is captured: the tokens so far, the states of the fed
    positions, the logits row of every continuation position, and what is left of its guess."""

    def __init__(self, prompt: list[int], guess: list[int], cache, needed):
        self.prompt, self.guess, self.cache, self.needed = prompt, list(guess), cache, needed
        self.continuation: list[int] = []
        self.states: dict[int, list[torch.Tensor]] = {}
        self.rows: list[torch.Tensor] = []
        self.chunk = GUESS_CHUNK

    @property
    def done(self) -> bool:
        return len(self.continuation) >= self.needed(self.continuation)

    def feed(self) -> list[int]:
        """The tokens the next forward takes: the last token, then the next guessed ones (at most
        what the continuation still needs past it)."""
        have = len(self.continuation)
        room = self.needed(self.continuation) - have  # tokens still to find; the last of them is never fed
        guessed = self.guess[have : have + min(self.chunk, room - 1)] if room > 1 else []
        return [self.continuation[-1], *guessed]

    def take(self, output, fed: list[int], indices) -> None:
        """Keep the fed positions the target agrees with and the row after the last of them."""
        guesses = output.logits[0].argmax(-1).tolist()
        kept = 1  # the last token is the target's own; each guessed token holds while the row before agrees
        while kept < len(fed) and guesses[kept - 1] == fed[kept]:
            kept += 1
        self._keep(output, kept, indices)
        self.continuation += [*fed[1:kept], guesses[kept - 1]]
        if kept < len(fed):  # the guess is wrong from here on: the cache drops its positions
            self.cache.crop(len(self.prompt) + len(self.continuation) - 1)
            self.guess = []
        elif len(fed) > 1:
            self.chunk *= 2

    def _keep(self, output, rows: int, indices) -> None:
        for i in indices:
            self.states.setdefault(i, []).append(output.states[i][:rows].float().cpu())
        self.rows.append(output.logits[0, :rows].float().cpu())


@torch.inference_mode()
def capture_traces(
    target, prompts: list[list[int]], budget: int, indices, guesses=None, stops=None
) -> list[Trace]:
    """The trace of each prompt for replays of at most `budget` new tokens, with the states at HF
    `indices` (`target`: a loaded target, anything with a `runner`, `device` and `dtype`). `guesses`:
    per prompt, a continuation to verify (module docstring) or None; `stops`: per prompt, the
    end-of-generation ids of each replay its trace is for (None: replays that never stop early; the
    continuation then runs to budget + MARGIN). The prompts decode together: one forward of the target
    per round for all of them (`forward_many`), each taking its last token and its guess's next chunk."""
    runner = target.runner
    indices = sorted(set(indices))

    def needed(sets):
        sets = list(sets or ()) or [frozenset()]
        return lambda continuation: max(tokens_read(continuation, budget, s) for s in sets)

    guesses = guesses or [None] * len(prompts)
    stops = stops or [None] * len(prompts)
    decodes = [
        _Decode(list(p), g or [], runner.new_cache(), needed(s))
        for p, g, s in zip(prompts, guesses, stops, strict=True)
    ]
    outputs = runner.forward_many(
        [d.prompt for d in decodes], [d.cache for d in decodes], [0] * len(decodes), indices, last_logits=True
    )
    for decode, output in zip(decodes, outputs, strict=True):
        decode.states = {i: [output.states[i].float().cpu()] for i in indices}
        decode.rows.append(output.logits[0, -1:].float().cpu())
        decode.continuation.append(int(output.logits[0, -1].argmax()))
    active = [d for d in decodes if not d.done]
    while active:
        fed = [d.feed() for d in active]
        starts = [len(d.prompt) + len(d.continuation) - 1 for d in active]
        outputs = runner.forward_many(fed, [d.cache for d in active], starts, indices)
        for decode, tokens, output in zip(active, fed, outputs, strict=True):
            decode.take(output, tokens, indices)
        active = [d for d in active if not d.done]
    source = f"local ({runner.name} forward, {str(target.dtype).removeprefix('torch.')}, {target.device})"
    return [_trace(d, budget, source) for d in decodes]


def _trace(decode: _Decode, budget: int, source: str) -> Trace:
    """One prompt's trace from its decode: the rows are those of positions len(prompt) - 1 onwards (the
    last position's row, which predicts past the continuation, is never read, and its states were not
    computed). A verified guess may have run past what the continuation needs: both are cut to it."""
    length = decode.needed(decode.continuation)
    continuation = decode.continuation[:length]
    logits = torch.cat(decode.rows)[: len(continuation)]
    positions = len(decode.prompt) + len(continuation) - 1
    states = {i: torch.cat(parts)[:positions] for i, parts in decode.states.items()}
    stats = row_stats(logits)
    top = torch.log_softmax(logits, dim=-1).topk(min(TOP, logits.shape[-1]), dim=-1)
    prompt_rows = len(decode.prompt) - 1  # rows of the prompt's other positions: never read by a replay

    def pad(values: torch.Tensor, fill) -> torch.Tensor:
        return torch.cat([torch.full((prompt_rows, *values.shape[1:]), fill, dtype=values.dtype), values])

    return Trace(
        decode.prompt,
        continuation,
        states,
        pad(top.indices, -1),
        pad(top.values, -torch.inf),
        pad(torch.tensor(stats.entropies), float("nan")),
        pad(torch.tensor(stats.near_tie), False),
        budget,
        source,
    )
