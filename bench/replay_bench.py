"""Replay throughput: SpecLens's speculative replay against the target's plain HF greedy `generate`.

What is measured (all in one process, on the same random-init target, fp32 on CPU, 2 threads):

  generate        `model.generate(prompt, do_sample=False, max_new_tokens=N)`: the baseline.
  replay          `backend.engine.replay.replay(..., ReplayConfig(K, N, record=False))` drained in memory:
                  the engine alone (draft catch-up + K-step chain + one verify per step, no DB).
  replay+record   `backend.service.jobs.run_replay`'s runner (resolve, then run_plan) with `record=True`: the full path the CLI and the
                  dashboard use (probabilities, top-k alternatives, hidden states; batched SQLite
                  commits into a temporary database, then the safetensors artifact).

Three drafts run on the same target (`make_bigram_target`: Llama, 8 layers, hidden 256, vocab 200;
its attention is computed but its output zeroed, and its lm_head makes the greedy next token a fixed
map f(x) that is one cycle through all 200 tokens, so greedy text never loops on a few tokens):

  partial `bigram_draft_tensors` believing f with 20% of its entries wrong: some drafts right, some
          wrong -> accept length ~2.3, the regime of a real, imperfect EAGLE-3 head.
  bigram  `bigram_draft_tensors` told f itself: every d_j is right, so every step accepts all K
          -> accept length K+1 = 5, the best case of chain speculation.
  random  `random_draft_tensors` with a 128-token draft vocabulary -> accept length ~1 (every step
          emits only the bonus token, so it pays K draft steps + a K+1-row verify per token).

Each replay's output is checked token for token against generate's output at the same length (greedy
speculative decoding must reproduce it exactly): column `=gen`.

How to read the table:
  runs         timed runs behind the row: --repeats interleaved rounds (one at 2048 tokens), plus up
               to --retries reruns of a case while every run of it saw CPU contention.
  seconds      best (minimum) wall time over those runs: the least-disturbed run on a noisy machine.
               The JSON keeps every run and the median.
  cpu_wait%    contention during the chosen run: PSI `some` CPU stall time (other processes of this
               VM waiting for a CPU) plus hypervisor steal, as % of its wall time. With 2 torch threads
               on 2 cores any contention stalls whole ops, so a row with more than a few % is suspect.
  tokens/s     new_tokens / seconds; ms/token is its inverse. Prefill is included everywhere.
  accept_len   mean over verify steps of a + 1 (bonus included): tokens emitted per target verify.
  vs_gen       tokens/s of the row / tokens/s of generate at the same new_tokens (>1 = faster).
  draft/verify ms/token: the engine's own timers (StepRecord.draft_ms / verify_ms) per emitted token;
               the rest of ms/token is Python, recording and DB overhead.
The summary under the table gives (b) the cost of recording (replay+record seconds / replay seconds)
and (c) flatness: ms/token at the longest length / ms/token at the shortest (about 1 = no quadratic
recompute; a ratio that grows with the length ratio means per-token cost grows with the context).

Before every timed run the bench waits (up to --quiet-wait s) until no other process has contended
the CPU for 10 s, and reruns a case whose runs were all contended (--retries).
Modes are interleaved within each repeat so slow drift of the machine hits them alike; ratios are only
meaningful within one run. Run: `PYTHONPATH=. .venv/bin/python bench/replay_bench.py [--quick]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from backend.drafts.draft_config import parse_draft_config
from backend.drafts.readings import declared_wiring
from backend.engine.draft_model import Eagle3Draft
from backend.engine.loading import Target, load_target
from backend.engine.preflight import load_checked_draft
from backend.engine.replay import ReplayConfig, StepRecord, output_ids_of, replay
from backend.run.request import ReplayRequest
from backend.run.wiring import Wiring
from backend.service.database import open_database
from backend.service.jobs import run_plan
from backend.service.plan import resolve
from tests.support.synthetic import (
    TargetShape,
    bigram_draft_tensors,
    corrupt_next_token_map,
    cyclic_next_token_map,
    draft_config_dict,
    make_bigram_target,
    random_draft_tensors,
    save_draft,
)

NUM_STEPS = 4  # K
THREADS = 2
PROMPT_LENGTH = 16
WARMUP_TOKENS = 32
FULL_LENGTHS = (256, 1024, 2048)
QUICK_LENGTHS = (16, 32, 64)
SINGLE_RUN_FROM = 2048  # lengths >= this run once, whatever --repeats says
TARGET_SPEC = dict(num_layers=8, hidden=256, vocab=200, heads=8, kv_heads=4, intermediate=688)
PARTIAL_WRONG_SHARE = 0.2
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "replay_bench.json"
MODES = ("generate", "replay", "replay+record")
DRAFTS = ("partial", "bigram", "random")


@dataclass
class DraftSetup:
    name: str
    draft: Eagle3Draft
    wiring: Wiring
    path: Path


@dataclass
class Setup:
    target: Target
    drafts: list[DraftSetup]
    prompt: list[int]


@dataclass
class Timing:
    """One timed run: wall seconds, emitted ids and (replays only) the engine's per-step numbers."""

    seconds: float
    output_ids: list[int]
    accepted_counts: list[int] = field(default_factory=list)
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    cpu_wait: float | None = None  # fraction of the wall time the CPU was contended (see CpuMeter)


@dataclass
class Row:
    draft: str
    mode: str
    new_tokens: int
    runs: list[float]
    seconds: float
    median_seconds: float
    cpu_wait_pct: float | None
    tokens_per_s: float
    ms_per_token: float
    accept_length: float | None
    verify_steps: int | None
    draft_ms_per_token: float | None
    verify_ms_per_token: float | None
    vs_generate: float | None = None
    equals_generate: bool | None = None


# ------------------------------------------------------------------------------------------ setup


def build_setup(root: Path) -> Setup:
    """Write the target and the three drafts under `root`, then load them as the app does."""
    follow = cyclic_next_token_map(TARGET_SPEC["vocab"])
    model = make_bigram_target(root / "target", follow, TargetShape(**TARGET_SPEC))
    configs = {  # SpecForge nested ids are output-of-layer ids: HF index = id + 1; chunk 0 = HF 0
        "partial": draft_config_dict(model.config, layout="specforge", aux_ids=[-1, 1, 2]),
        "bigram": draft_config_dict(model.config, layout="specforge", aux_ids=[-1, 1, 2]),
        "random": draft_config_dict(model.config, draft_vocab=128, layout="specforge"),  # default wiring
    }
    believed = corrupt_next_token_map(follow, PARTIAL_WRONG_SHARE)
    tensors = {
        "partial": bigram_draft_tensors(model, configs["partial"], believed),
        "bigram": bigram_draft_tensors(model, configs["bigram"], follow),
        "random": random_draft_tensors(configs["random"]),
    }
    for name in DRAFTS:
        save_draft(root / f"draft-{name}", configs[name], tensors[name])
    del model
    target = load_target(root / "target", device="cpu", dtype="fp32")
    drafts = [_load_draft(name, root / f"draft-{name}", configs[name], target) for name in DRAFTS]
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, TARGET_SPEC["vocab"], (PROMPT_LENGTH,), generator=generator).tolist()
    return Setup(target, drafts, prompt)


def _load_draft(name: str, path: Path, config: dict, target: Target) -> DraftSetup:
    wiring = declared_wiring(parse_draft_config(config), target.num_layers)
    return DraftSetup(name, load_checked_draft(path, target)[0], wiring, path)


# ------------------------------------------------------------------------------------ cpu noise


class CpuMeter:
    """How contended the CPU was while a run lasted: Linux PSI `some` stall time (other runnable tasks
    waiting for a CPU: other processes on this VM) plus hypervisor steal time, as a fraction of the
    wall time. None where /proc does not offer them."""

    def __init__(self):
        self.start = self._read()
        self.started = time.perf_counter()

    @staticmethod
    def _read() -> tuple[float, float] | None:
        try:
            psi = Path("/proc/pressure/cpu").read_text().splitlines()[0]
            stall_us = float(psi.rsplit("total=", 1)[1])
            fields = Path("/proc/stat").read_text().splitlines()[0].split()
            steal_s = float(fields[8]) / os.sysconf("SC_CLK_TCK") / (os.cpu_count() or 1)
        except (OSError, IndexError, ValueError):
            return None
        return stall_us / 1e6, steal_s

    @staticmethod
    def recent_pressure() -> float | None:
        """PSI `some` avg10 as a fraction: how contended the CPU was over the last 10 seconds."""
        try:
            psi = Path("/proc/pressure/cpu").read_text().splitlines()[0]
            return float(psi.split("avg10=", 1)[1].split()[0]) / 100.0
        except (OSError, IndexError, ValueError):
            return None

    def fraction(self) -> float | None:
        end, wall = self._read(), time.perf_counter() - self.started
        if self.start is None or end is None or wall <= 0:
            return None
        return ((end[0] - self.start[0]) + (end[1] - self.start[1])) / wall


# ----------------------------------------------------------------------------------------- timing


def time_generate(target: Target, prompt: list[int], new_tokens: int) -> Timing:
    inputs = torch.tensor([prompt], device=target.device)
    with torch.inference_mode():
        started = time.perf_counter()
        output = target.model.generate(inputs, do_sample=False, max_new_tokens=new_tokens, pad_token_id=0)
        seconds = time.perf_counter() - started
    return Timing(seconds, output[0, len(prompt) :].tolist())


def time_replay(target: Target, pair: DraftSetup, prompt: list[int], new_tokens: int) -> Timing:
    config = ReplayConfig(num_steps=NUM_STEPS, max_new_tokens=new_tokens, record=False)
    started = time.perf_counter()
    records = list(replay(target, pair.draft, prompt, pair.wiring, config))
    seconds = time.perf_counter() - started
    steps = [r for r in records if isinstance(r, StepRecord)]
    return _replay_timing(seconds, output_ids_of(records), steps)


def time_recorded(target: Target, pair: DraftSetup, prompt: list[int], new_tokens: int, database) -> Timing:
    request = ReplayRequest(
        target.path,
        str(pair.path),
        prompt_ids=tuple(prompt),
        num_steps=NUM_STEPS,
        max_new_tokens=new_tokens,
        record=True,
    )
    started = time.perf_counter()
    outcome = run_plan(database, target, pair.draft, resolve(request, target, pair.draft))
    seconds = time.perf_counter() - started
    return _replay_timing(seconds, outcome.output_ids, outcome.steps)


def _replay_timing(seconds: float, output_ids: list[int], steps: list[StepRecord]) -> Timing:
    return Timing(
        seconds,
        output_ids,
        [s.accepted_count for s in steps],
        sum(s.draft_ms for s in steps),
        sum(s.verify_ms for s in steps),
    )


class Runner:
    """Runs every (draft, mode) at one length, keeping every repeat's Timing."""

    def __init__(self, setup: Setup, database, quiet_wait: float, log):
        self.setup, self.database = setup, database
        self.quiet_wait, self.log = quiet_wait, log
        self.waited_s = 0.0

    def cases(self) -> list[tuple[str, str]]:
        return [("-", "generate")] + [(d.name, m) for d in self.setup.drafts for m in MODES[1:]]

    def run(self, draft_name: str, mode: str, new_tokens: int) -> Timing:
        self.waited_s += wait_for_quiet(self.quiet_wait, self.log)
        meter = CpuMeter()
        timing = self._run(draft_name, mode, new_tokens)
        timing.cpu_wait = meter.fraction()
        return timing

    def _run(self, draft_name: str, mode: str, new_tokens: int) -> Timing:
        target, prompt = self.setup.target, self.setup.prompt
        if mode == "generate":
            return time_generate(target, prompt, new_tokens)
        pair = next(d for d in self.setup.drafts if d.name == draft_name)
        if mode == "replay":
            return time_replay(target, pair, prompt, new_tokens)
        return time_recorded(target, pair, prompt, new_tokens, self.database)

    def warm_up(self, log) -> None:
        for draft_name, mode in self.cases():
            timing = self.run(draft_name, mode, WARMUP_TOKENS)
            log(f"  warm-up N={WARMUP_TOKENS} {draft_name:>6} {mode:<13} {timing.seconds:8.2f} s")

    def measure(
        self, new_tokens: int, repeats: int, retries: int, log
    ) -> dict[tuple[str, str], list[Timing]]:
        """`repeats` interleaved rounds over every case; then each case whose runs were all contended
        (cpu_wait above CONTENDED) is run again, up to `retries` times."""
        timings: dict[tuple[str, str], list[Timing]] = {case: [] for case in self.cases()}
        for repeat in range(repeats):
            for case in self.cases():  # interleaved: drift of the machine hits every mode alike
                self._run_logged(timings, case, new_tokens, f"repeat {repeat + 1}/{repeats}", log)
        for retry in range(retries):
            for case in [c for c in self.cases() if all(_contended(t) for t in timings[c])]:
                self._run_logged(timings, case, new_tokens, f"retry {retry + 1}/{retries} ", log)
        return timings

    def _run_logged(self, timings: dict, case: tuple[str, str], new_tokens: int, label: str, log) -> None:
        timing = self.run(*case, new_tokens)
        timings[case].append(timing)
        wait = "?" if timing.cpu_wait is None else f"{100 * timing.cpu_wait:.0f}%"
        log(f"  N={new_tokens} {label} {case[0]:>6} {case[1]:<13} {timing.seconds:8.2f} s  cpu_wait {wait}")


CONTENDED = 0.05  # a run that saw the CPU contended for over 5% of its wall time is retried


def wait_for_quiet(limit_s: float, log) -> float:
    """Before a timed run, wait (at most `limit_s`) until no other process has contended the CPU for
    the last 10 s: a concurrent test suite on these 2 cores slows 2-thread torch ops many times over."""
    started = time.monotonic()
    logged = False
    while time.monotonic() - started < limit_s:
        pressure = CpuMeter.recent_pressure()
        if pressure is None or pressure <= CONTENDED:
            break
        if not logged:
            log(f"  CPU contended ({pressure:.0%} over 10 s); waiting up to {limit_s:.0f} s for quiet")
            logged = True
        time.sleep(2.0)
    return time.monotonic() - started


def _contended(timing: Timing) -> bool:
    return timing.cpu_wait is not None and timing.cpu_wait > CONTENDED


# ----------------------------------------------------------------------------------------- report


def make_row(draft: str, mode: str, new_tokens: int, timings: list[Timing]) -> Row:
    best = min(timings, key=lambda t: t.seconds)
    counts = best.accepted_counts
    replayed = mode != "generate"
    runs = [t.seconds for t in timings]
    wait = None if best.cpu_wait is None else 100.0 * best.cpu_wait
    return Row(
        draft,
        mode,
        new_tokens,
        runs,
        best.seconds,
        statistics.median(runs),
        wait,
        new_tokens / best.seconds,
        1000.0 * best.seconds / new_tokens,
        (sum(counts) / len(counts) + 1.0) if counts else None,
        len(counts) if replayed else None,
        best.draft_ms / new_tokens if replayed else None,
        best.verify_ms / new_tokens if replayed else None,
    )


def rows_for_length(new_tokens: int, timings: dict[tuple[str, str], list[Timing]]) -> list[Row]:
    reference = min(timings[("-", "generate")], key=lambda t: t.seconds)
    rows = []
    for (draft, mode), runs in timings.items():
        row = make_row(draft, mode, new_tokens, runs)
        row.vs_generate = reference.seconds / row.seconds
        row.equals_generate = all(t.output_ids == reference.output_ids for t in runs)
        rows.append(row)
    return rows


COLUMNS = (
    "draft",
    "mode",
    "new_tokens",
    "runs",
    "seconds",
    "tokens/s",
    "ms/token",
    "accept_len",
    "vs_gen",
    "=gen",
    "draft_ms/tok",
    "verify_ms/tok",
    "cpu_wait%",
)


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table_lines(rows: list[Row]) -> list[str]:
    cells = [COLUMNS] + [
        (
            r.draft,
            r.mode,
            str(r.new_tokens),
            str(len(r.runs)),
            _fmt(r.seconds),
            _fmt(r.tokens_per_s, 1),
            _fmt(r.ms_per_token),
            _fmt(r.accept_length),
            _fmt(r.vs_generate),
            "yes" if r.equals_generate else "NO",
            _fmt(r.draft_ms_per_token),
            _fmt(r.verify_ms_per_token),
            _fmt(r.cpu_wait_pct, 0),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in cells
    ]
    lines.insert(1, "-" * len(lines[0]))
    return lines


def summary(rows: list[Row]) -> dict:
    """(b) recording cost per draft and length; (c) ms/token growth from the shortest to the longest length."""
    by_key = {(r.draft, r.mode, r.new_tokens): r for r in rows}
    lengths = sorted({r.new_tokens for r in rows})
    record_cost = {
        f"{d}@{n}": by_key[(d, "replay+record", n)].seconds / by_key[(d, "replay", n)].seconds
        for (d, m, n) in by_key
        if m == "replay"
    }
    growth = {
        f"{d}/{m}": by_key[(d, m, lengths[-1])].ms_per_token / by_key[(d, m, lengths[0])].ms_per_token
        for (d, m, n) in by_key
        if n == lengths[0]
    }
    return {"record_seconds_over_plain": record_cost, f"ms_per_token_{lengths[-1]}_over_{lengths[0]}": growth}


def summary_lines(result: dict) -> list[str]:
    lines = ["", "(b) recording cost: replay+record seconds / replay seconds"]
    lines += [f"    {key:<14} {value:6.2f}x" for key, value in result["record_seconds_over_plain"].items()]
    growth_key = next(k for k in result if k.startswith("ms_per_token_"))
    lines += ["", f"(c) flatness: {growth_key} (about 1 = per-token cost does not grow with length)"]
    lines += [f"    {key:<22} {value:6.2f}" for key, value in result[growth_key].items()]
    return lines


# ------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"lengths {QUICK_LENGTHS} (smoke test)")
    parser.add_argument(
        "--target-layers",
        type=int,
        default=TARGET_SPEC["num_layers"],
        help="target depth: the draft is one layer, so this sets the draft/target cost ratio "
        "(Llama-3.1-8B has 32 layers)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results path")
    parser.add_argument(
        "--demo",
        action="store_true",
        help="a bundled pair instead: generate, greedy loop, replay, replay+record, job runner, and "
        "the tree (3, 4, 8) replayed, recorded and through the job runner, the ideal speed-up, vLLM's own "
        "tokens/s (bench/demo_bench.py); --repeats sets the rounds",
    )
    parser.add_argument(
        "--demo-tokens",
        type=int,
        default=256,
        help="new tokens per prompt with --demo (at most 96 on SmolLM2)",
    )
    parser.add_argument(
        "--pair",
        choices=["toy", "smollm2"],
        help="with --demo: the bundled pair (default: the active one, SmolLM2 once set up)",
    )
    parser.add_argument("--no-vllm", action="store_true", help="with --demo: leave out vLLM's own rows")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help=f"interleaved timed rounds for lengths < {SINGLE_RUN_FROM} (those >= get one)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=2,
        help=f"extra runs of a case while all its runs saw CPU contention > {CONTENDED * 100:.0f}%% "
        f"(lengths >= {SINGLE_RUN_FROM} get at most one)",
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=120.0,
        help="seconds to wait, before each timed run, for other processes to stop contending the "
        "CPU (PSI avg10 <= 5%%); 0 disables",
    )
    return parser.parse_args(argv)


def environment() -> dict:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "num_steps": NUM_STEPS,
        "prompt_length": PROMPT_LENGTH,
        "target": TARGET_SPEC,
        "dtype": "fp32",
        "device": "cpu",
    }


def run_benchmark(lengths: tuple[int, ...], repeats: int, retries: int, quiet_wait: float, log) -> dict:
    with tempfile.TemporaryDirectory(prefix="replay_bench_") as tmp:
        root = Path(tmp)
        setup = build_setup(root / "models")
        url = f"sqlite:///{root / 'db' / 'bench.db'}"
        runner = Runner(setup, open_database(url), quiet_wait, log)
        env = environment()
        env["aux_hf_indices"] = {d.name: list(d.wiring.aux_hf_indices) for d in setup.drafts}
        started = time.perf_counter()
        runner.warm_up(log)
        rows: list[Row] = []
        for new_tokens in lengths:
            long = new_tokens >= SINGLE_RUN_FROM
            timings = runner.measure(
                new_tokens, 1 if long else repeats, min(retries, 1) if long else retries, log
            )
            rows += rows_for_length(new_tokens, timings)
        runner.database.close()
    env["loadavg_end"] = os.getloadavg()
    env["total_seconds"] = time.perf_counter() - started
    env["quiet_wait_seconds"] = runner.waited_s
    rows = order(rows)
    return {
        "environment": env,
        "prompt": setup.prompt,
        "rows": [asdict(r) for r in rows],
        "summary": summary(rows),
    }


def order(rows: list[Row]) -> list[Row]:
    rank = {"-": 0, **{name: i + 1 for i, name in enumerate(DRAFTS)}}
    return sorted(rows, key=lambda r: (rank.get(r.draft, 9), MODES.index(r.mode), r.new_tokens))


def run_demo(args: argparse.Namespace) -> int:
    """The demo pair's table (bench/demo_bench.py), after waiting (up to --quiet-wait s) for a quiet
    CPU; the JSON also says how contended the CPU was over the whole run (see CpuMeter), since on a
    shared machine that decides how far to trust the medians."""
    from bench import demo_bench

    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    out = args.out if args.out != DEFAULT_OUT else DEFAULT_OUT.with_name("replay_bench_demo.json")
    waited = wait_for_quiet(max(0.0, args.quiet_wait), log)
    meter = CpuMeter()
    from backend.defaults import PAIRS

    pair = next((p for p in PAIRS if p.key == args.pair), None)
    code = demo_bench.main(out, max(2, args.repeats), args.demo_tokens, pair, vllm=not args.no_vllm)
    contended = meter.fraction()
    result = json.loads(out.read_text())
    result.update(cpu_wait=contended, quiet_wait_seconds=waited, loadavg_end=os.getloadavg())
    out.write_text(json.dumps(result, indent=2, default=str))
    if contended is not None:
        print(
            f"CPU contended (PSI some + steal) for {contended:.0%} of the run's wall time; waited "
            f"{waited:.0f} s for a quiet CPU first"
        )
    return code


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.demo:
        return run_demo(args)
    TARGET_SPEC["num_layers"] = args.target_layers
    torch.set_num_threads(THREADS)
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    lengths = QUICK_LENGTHS if args.quick else FULL_LENGTHS
    result = run_benchmark(
        lengths, max(1, args.repeats), max(0, args.retries), max(0.0, args.quiet_wait), log
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    env = result["environment"]
    print(
        f"replay bench: target {TARGET_SPEC['num_layers']} layers x {TARGET_SPEC['hidden']} wide, one-layer drafts, "
        f"K={NUM_STEPS}, fp32 CPU, {env['threads']} threads, prompt {PROMPT_LENGTH} tokens, "
        f"load avg {env['loadavg_start'][0]:.2f} -> {env['loadavg_end'][0]:.2f}, "
        f"{env['total_seconds']:.0f} s warm-up + timed runs (of which {env['quiet_wait_seconds']:.0f} s "
        "waiting for a quiet CPU)"
    )
    print("\n".join(table_lines([Row(**r) for r in result["rows"]]) + summary_lines(result["summary"])))
    print(f"\nJSON: {args.out}")
    mismatched = [r for r in result["rows"] if not r["equals_generate"]]
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
