"""Projections of a few rows: transformers' `F.linear` against the lean forward's weight @ x^T
(`backend/target/product.product`), on the real pair's shapes (SmolLM2-135M: hidden 576,
intermediate 1536, vocab 49152), fp32, 2 threads.

    PYTHONPATH=. python bench/product_bench.py [--repeat 200]

Prints one row per (shape, rows): the median ms of each and their ratio, and whether the two are
equal bit for bit (one row and past MM_ROWS: `product` is `F.linear` itself). The weights stay in
the CPU's caches here, unlike in a forward that streams 30 layers' weights: the end-to-end numbers
are bench/replay_bench.py --demo's.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

SHAPES = {"q/o 576x576": (576, 576), "gate/up 1536x576": (1536, 576), "down 576x1536": (576, 1536),
          "lm_head 49152x576": (49152, 576)}  # fmt: skip
ROWS = (1, 2, 5, 8, 16, 32, 80)


def median_ms(call, repeat: int) -> float:
    for _ in range(3):
        call()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    from backend.target.product import product

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    generator = torch.Generator().manual_seed(0)
    print(f"{'shape':20s} {'rows':>4s} {'F.linear ms':>12s} {'W @ x^T ms':>11s} {'ratio':>6s}  equal")
    for name, (out, width) in SHAPES.items():
        weight = torch.randn(out, width, generator=generator)
        repeat = max(10, args.repeat // 10) if out > 10_000 else args.repeat
        for rows in ROWS:
            x = torch.randn(1, rows, width, generator=generator)
            linear = median_ms(lambda x=x, w=weight: F.linear(x, w), repeat)
            ours = median_ms(lambda x=x, w=weight: product(x, w), repeat)
            equal = torch.equal(F.linear(x, weight), product(x, weight))
            print(f"{name:20s} {rows:4d} {linear:12.3f} {ours:11.3f} {linear / ours:6.2f}  {equal}")


if __name__ == "__main__":
    main()
