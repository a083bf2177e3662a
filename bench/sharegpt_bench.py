"""Time per turn of a ShareGPT import: one long conversation and a file of many, printed as a table.

    PYTHONPATH=. python bench/sharegpt_bench.py [--turns 1000 2000 4000] [--records 10000]

Each case is a ShareGPT file rendered with the bundled demo target's chat template, read twice:
in-process (`read_dataset`: rendering, tokenizing, masking) and through the CLI a user runs
(`python -m backend import`, a fresh SQLite file; its time includes the interpreter and the model
stack's import, a fixed few seconds). A linear import keeps the "ms / turn" column flat as the
turns double; the old per-turn prefix rendering grew it with the length (x2.5 for x2 turns).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def conversation(turns: int, seed: int) -> dict:
    messages = []
    for i in range(turns):
        if i % 2 == 0:
            messages.append({"from": "human", "value": f"question {seed}.{i}: what is {i} * {seed % 7}?"})
        else:
            messages.append({"from": "gpt", "value": f"It is {(i - 1) * (seed % 7)}.\n    (turn {i})"})
    return {"id": f"bench-{seed}", "conversations": messages}


def write(path: Path, records: int, turns: int) -> int:
    path.write_text(json.dumps([conversation(turns, seed) for seed in range(records)]))
    return records * turns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, nargs="+", default=[1000, 2000, 4000])
    parser.add_argument("--records", type=int, default=10000, help="records of 4 turns in the file case")
    args = parser.parse_args(argv)
    from backend.data.importer import read_dataset
    from backend.defaults import DEMO_TARGET
    from backend.engine.loading import load_tokenizer

    tokenizer = load_tokenizer(DEMO_TARGET)
    folder = Path(tempfile.mkdtemp(prefix="sharegpt_bench_"))
    cases = [(f"1 x {t} turns", 1, t) for t in args.turns] + [(f"{args.records} x 4 turns", args.records, 4)]
    print(f"{'case':>20} {'turns':>7} {'read s':>8} {'ms / turn':>10} {'CLI import s':>13} {'imported':>9}")
    status = 0
    for label, records, turns in cases:
        path = folder / f"{records}x{turns}.json"
        total = write(path, records, turns)
        started = time.perf_counter()
        result = read_dataset(path, tokenizer, None, "sharegpt")
        read_s = time.perf_counter() - started
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "backend", "import", "--samples", str(path),
             "--db", f"sqlite:///{folder / f'{records}x{turns}.db'}", "--json"],
            cwd=ROOT, capture_output=True, text=True,
        )  # fmt: skip
        cli_s = time.perf_counter() - started
        imported = json.loads(done.stdout)["imported"] if done.returncode == 0 else "failed"
        if done.returncode != 0 or result.rejected or imported != records:
            print(done.stderr or result.rejected[:3], file=sys.stderr)
            status = 1
        print(
            f"{label:>20} {total:>7} {read_s:>8.2f} {1000 * read_s / total:>10.3f} {cli_s:>13.2f} {imported:>9}"
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
