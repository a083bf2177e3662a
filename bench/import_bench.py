"""Memory and time of a training-JSONL import through the CLI (what a user runs), printed as a table.

    PYTHONPATH=. python bench/import_bench.py --mb 200

Writes a JSONL of valid records (ids inside the demo target's vocabulary) of about --mb megabytes,
imports it with `python -m backend import` into a fresh SQLite file in a child process, and reports
the child's peak resident memory (getrusage of the children) beside the file size. The import
streams (one line, then batches of 256 samples, inside one transaction), so the peak should stay
near the interpreter's own footprint plus one batch, not grow with the file.
"""

from __future__ import annotations

import argparse
import atexit
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_file(path: Path, megabytes: float, seed: int = 0) -> int:
    rng = random.Random(seed)
    records, written = 0, 0
    with path.open("w") as handle:
        while written < megabytes * 1024 * 1024:
            length = rng.randint(512, 2048)
            prompt = rng.randint(16, 128)
            ids = [rng.randrange(3, 2000) for _ in range(length)]
            line = json.dumps(
                {
                    "input_ids": ids,
                    "loss_mask": [0] * prompt + [1] * (length - prompt),
                    "seq_len": length,
                    "n_prompt_tokens": prompt,
                    "n_response_tokens": length - prompt,
                    "source": "bench",
                }
            )
            handle.write(line + "\n")
            written += len(line) + 1
            records += 1
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=float, default=200.0, help="size of the generated JSONL (default 200)")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="import_bench_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # a 200 MB file
    data = folder / "big.jsonl"
    records = write_file(data, args.mb)
    size_mb = data.stat().st_size / 1024**2
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "backend", "import", "--samples", str(data), "--db", f"sqlite:///{folder / 'b.db'}",
         "--json"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return 1
    imported = json.loads(done.stdout)["imported"]
    print(
        f"{'file MB':>8} {'records':>8} {'imported':>8} {'seconds':>8} {'peak RSS MB':>11} {'peak / file':>11}"
    )
    print(
        f"{size_mb:>8.1f} {records:>8} {imported:>8} {seconds:>8.1f} {peak_mb:>11.1f} {peak_mb / size_mb:>11.2f}"
    )
    return 0 if imported == records else 1


if __name__ == "__main__":
    sys.exit(main())
