"""How degenerate a text is: the share of repeated 4-grams.

For a token sequence, `repeated_ngram_share` counts the n-grams (n = 4) that already occurred earlier
in the same sequence, divided by the number of n-grams. A greedy output stuck in a loop
("kw_dir, kw_dir, kw_dir, ...") scores near 1; ordinary code scores what its own idioms repeat
("self.", "return None"). The demo reports it for the target's greedy outputs next to the same measure
on the corpus: the true continuations of the same prompts (the held-out file's next tokens), so both
sides are windows of equal length after equal prompts.
"""

from __future__ import annotations

N = 4


def repeated_ngram_share(ids: list[int], n: int = N) -> float:
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    if not grams:
        return 0.0
    seen: set[tuple[int, ...]] = set()
    repeats = 0
    for gram in grams:
        repeats += gram in seen
        seen.add(gram)
    return repeats / len(grams)


def mean_share(sequences: list[list[int]], n: int = N) -> float:
    shares = [repeated_ngram_share(s, n) for s in sequences if len(s) >= n]
    return sum(shares) / len(shares) if shares else 0.0
