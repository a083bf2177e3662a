"""Where the job runner's time goes: cProfile of `run_plan` (what the CLI and the dashboard run).

    PYTHONPATH=. python bench/profile_job.py [--pair demo|real|bench32] [--prompts 2] [--tokens 256] [--top 15]
                                             [--batch]

  demo     the bundled toy pair (demo/target, demo/drafts/final) on the first eval prompts, K = 4
  real     the SmolLM2 pair (demo/smollm2/target, drafts/final) on its first eval prompts, K = 4
  bench32  replay_bench's synthetic target made 32 layers deep (hidden 256) with its `partial` draft
           (accept length ~2.3), on its 16-token prompt

--batch replays the prompts as one batch (`run_plans`, what `evaluate --batch` runs) instead of one
job after another. One warm-up job runs first (not profiled); then the profiled jobs write into a temporary SQLite
database. Prints the top entries by own time (tottime), then SpecLens's own functions (backend/) by
cumulative time, which name the stages (verify, draft, recording, store), each with its share of
the profiled wall time.
cProfile adds per-call overhead, so the shares of Python-heavy entries are overstated; use the
shares to rank, and bench/replay_bench.py for speeds.
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import json
import pstats
import shutil
import tempfile
import time
from pathlib import Path

import torch


def demo_pair(prompts: int, real: bool = False):
    from backend.defaults import DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET, SMOLLM2
    from backend.engine.loading import load_target
    from backend.engine.preflight import load_checked_draft

    target_dir, drafts, evaluation = (
        (SMOLLM2 / "target", SMOLLM2 / "drafts", SMOLLM2 / "data" / "eval.jsonl")
        if real
        else (DEMO_TARGET, DEMO_DRAFTS, DEMO_EVAL)
    )
    target = load_target(target_dir, device="cpu", dtype="fp32")
    draft, report = load_checked_draft(drafts / "final", target)
    records = [json.loads(line) for line in evaluation.read_text().splitlines()[:prompts]]
    prompt_ids = [r["input_ids"][: r["n_prompt_tokens"]] for r in records]
    return target, draft, report.wiring, str(target_dir), str(drafts / "final"), prompt_ids


def bench32_pair(prompts: int, root: Path):
    from bench import replay_bench

    replay_bench.TARGET_SPEC["num_layers"] = 32
    setup = replay_bench.build_setup(root)
    pair = next(d for d in setup.drafts if d.name == "partial")
    return (
        setup.target,
        pair.draft,
        pair.wiring,
        str(root / "target"),
        str(pair.path),
        [setup.prompt] * prompts,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", choices=("demo", "real", "bench32"), default="demo")
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument(
        "--batch", action="store_true", help="replay the prompts as one batch (run_plans, what evaluate runs)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(2)

    from backend.run.request import ReplayRequest
    from backend.service.batch_jobs import run_plans
    from backend.service.database import open_database
    from backend.service.jobs import run_plan
    from backend.service.plan import resolve

    folder = Path(tempfile.mkdtemp(prefix="profile_job_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    if args.pair in ("demo", "real"):
        target, draft, wiring, target_path, draft_path, prompts = demo_pair(args.prompts, args.pair == "real")
    else:
        target, draft, wiring, target_path, draft_path, prompts = bench32_pair(args.prompts, folder)
    database = open_database(f"sqlite:///{folder}/profile.db")

    def plan(prompt, tokens):
        request = ReplayRequest(
            target_path, draft_path, prompt_ids=tuple(prompt), num_steps=4, max_new_tokens=tokens
        )
        return resolve(request, target, draft)

    run_plan(database, target, draft, plan(prompts[0], 32))  # warm-up: first-call costs stay out
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    if args.batch:
        outcomes = run_plans(database, target, draft, [plan(p, args.tokens) for p in prompts])
    else:
        outcomes = [run_plan(database, target, draft, plan(p, args.tokens)) for p in prompts]
    profiler.disable()
    wall = time.perf_counter() - started
    tokens = sum(len(o.output_ids) for o in outcomes)
    steps = sum(len(o.steps) for o in outcomes)
    print(
        f"{args.pair}: {len(prompts)} jobs, {tokens} tokens, {steps} verify steps, accept length "
        f"{tokens / max(1, steps):.2f} (tokens per verify, prefill's token included), profiled wall {wall:.2f} s"
    )
    stats = pstats.Stats(profiler)
    rows = []
    for (file, line, name), (_, calls, own, cumulative, _) in stats.stats.items():
        ours = f"{Path.cwd().name}/backend/" in file or "/backend/" in file
        rows.append((own, cumulative, calls, f"{Path(file).name}:{line}({name})", file, ours))
    print(f"\ntop {args.top} by own time                                        own s  share  calls")
    for own, _, calls, label, _, _ in sorted(rows, key=lambda r: -r[0])[: args.top]:
        print(f"  {label[:60]:60s} {own:6.2f} {own / wall:6.1%} {calls:6d}")
    print(f"\ntop {args.top} by cumulative time, SpecLens's own functions      cum s  share  calls")
    ours = [r for r in rows if r[5]]
    for _, cumulative, calls, label, _, _ in sorted(ours, key=lambda r: -r[1])[: args.top]:
        print(f"  {label[:60]:60s} {cumulative:6.2f} {cumulative / wall:6.1%} {calls:6d}")


if __name__ == "__main__":
    main()
