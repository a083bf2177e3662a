"""Replay throughput: SpecLens's speculative replay against the target's plain HF greedy `generate`.

What is measured (all in one process, on the same random-init target, fp32 on CPU, 2 threads):

  generate        `model.generate(prompt, do_sample=False, max_new_tokens=N)`: the baseline.
  replay          `backend.replay.replay(..., ReplayConfig(K, N, record=False))` drained in memory:
                  the engine alone (draft catch-up + K-step chain + one verify per step, no DB).
  replay+record   `backend.jobs.run_replay_job` with `record=True`: the full path the CLI and the
                  dashboard use (probabilities, top-k alternatives, hidden states; one SQLite commit
                  per verify step into a temporary database, then the safetensors artifact).

Two drafts run on the same target (Llama, 8 layers, hidden 256, vocab 256, attention_scale 0, so the
target is a context-free bigram model):

  copy    `copy_draft_tensors`: predicts d_1 right almost always, d_2.. rarely -> accept length ~2
          (d_2.. are right only when the greedy sequence sits on a fixed point of the bigram map).
  random  `random_draft_tensors` with a 128-token draft vocabulary -> accept length ~1 (every step
          emits only the bonus token, so it pays K draft steps + a K+1-row verify per token).

Each replay's output is checked token for token against generate's output at the same length (greedy
speculative decoding must reproduce it exactly): column `=gen`.

How to read the table:
  seconds      best (minimum) wall time over the repeats for that row: the least-disturbed run on a
               noisy machine. The JSON keeps every repeat and the median.
  tokens/s     new_tokens / seconds; ms/token is its inverse. Prefill is included everywhere.
  accept_len   mean over verify steps of a + 1 (bonus included): tokens emitted per target verify.
  vs_gen       tokens/s of the row / tokens/s of generate at the same new_tokens (>1 = faster).
  draft/verify ms/token: the engine's own timers (StepRecord.draft_ms / verify_ms) per emitted token;
               the rest of ms/token is Python, recording and DB overhead.
The summary under the table gives (b) the cost of recording (replay+record seconds / replay seconds)
and (c) flatness: ms/token at the longest length / ms/token at the shortest (about 1 = no quadratic
recompute; a ratio that grows with the length ratio means per-token cost grows with the context).

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

from backend.checkpoints import Target, load_draft, load_target
from backend.draft_config import parse_draft_config
from backend.draft_model import Eagle3Draft
from backend.jobs import run_replay_job
from backend.replay import ReplayConfig, StepRecord, output_ids_of, replay
from backend.synthetic import (
    copy_draft_tensors,
    draft_config_dict,
    make_target,
    random_draft_tensors,
    save_draft,
)
from backend.wiring import Wiring, resolve_wiring
from db import store

NUM_STEPS = 4  # K
THREADS = 2
PROMPT_LENGTH = 16
WARMUP_TOKENS = 32
FULL_LENGTHS = (256, 1024, 2048)
QUICK_LENGTHS = (16, 32, 64)
SINGLE_RUN_FROM = 2048  # lengths >= this run once, whatever --repeats says
TARGET_SPEC = dict(num_layers=8, hidden=256, vocab=256, heads=8, kv_heads=4, intermediate=688,
                   attention_scale=0.0, eos_token_id=None)
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "replay_bench.json"
MODES = ("generate", "replay", "replay+record")


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


@dataclass
class Row:
    draft: str
    mode: str
    new_tokens: int
    runs: list[float]
    seconds: float
    median_seconds: float
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
    """Write the target and both drafts under `root`, then load them as the app does."""
    model = make_target(root / "target", **TARGET_SPEC)
    layers = TARGET_SPEC["num_layers"]
    copy_config = draft_config_dict(model.config, layout="specforge", aux_ids=[0, 1, layers - 1])
    random_config = draft_config_dict(model.config, draft_vocab=128, layout="specforge")
    save_draft(root / "draft-copy", copy_config, copy_draft_tensors(model, copy_config))
    save_draft(root / "draft-random", random_config, random_draft_tensors(random_config))
    del model
    target = load_target(root / "target", device="cpu", dtype="fp32")
    drafts = [_load_draft("copy", root / "draft-copy", copy_config, target),
              _load_draft("random", root / "draft-random", random_config, target)]
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, TARGET_SPEC["vocab"], (PROMPT_LENGTH,), generator=generator).tolist()
    return Setup(target, drafts, prompt)


def _load_draft(name: str, path: Path, config: dict, target: Target) -> DraftSetup:
    wiring = resolve_wiring(parse_draft_config(config), target.num_layers)
    return DraftSetup(name, load_draft(path, target), wiring, path)


# ----------------------------------------------------------------------------------------- timing

def time_generate(target: Target, prompt: list[int], new_tokens: int) -> Timing:
    inputs = torch.tensor([prompt], device=target.device)
    with torch.inference_mode():
        started = time.perf_counter()
        output = target.model.generate(inputs, do_sample=False, max_new_tokens=new_tokens, pad_token_id=0)
        seconds = time.perf_counter() - started
    return Timing(seconds, output[0, len(prompt):].tolist())


def time_replay(target: Target, pair: DraftSetup, prompt: list[int], new_tokens: int) -> Timing:
    config = ReplayConfig(num_steps=NUM_STEPS, max_new_tokens=new_tokens, record=False)
    started = time.perf_counter()
    records = list(replay(target, pair.draft, prompt, pair.wiring, config))
    seconds = time.perf_counter() - started
    steps = [r for r in records if isinstance(r, StepRecord)]
    return _replay_timing(seconds, output_ids_of(records), steps)


def time_recorded(target: Target, pair: DraftSetup, prompt: list[int], new_tokens: int, factory,
                  artifact_dir: Path) -> Timing:
    config = ReplayConfig(num_steps=NUM_STEPS, max_new_tokens=new_tokens, record=True)
    started = time.perf_counter()
    outcome = run_replay_job(factory, artifact_dir, target, pair.draft, str(pair.path), prompt, pair.wiring, config)
    seconds = time.perf_counter() - started
    return _replay_timing(seconds, outcome.output_ids, outcome.steps)


def _replay_timing(seconds: float, output_ids: list[int], steps: list[StepRecord]) -> Timing:
    return Timing(seconds, output_ids, [s.accepted_count for s in steps], sum(s.draft_ms for s in steps),
                  sum(s.verify_ms for s in steps))


class Runner:
    """Runs every (draft, mode) at one length, keeping every repeat's Timing."""

    def __init__(self, setup: Setup, factory, artifact_dir: Path):
        self.setup, self.factory, self.artifact_dir = setup, factory, artifact_dir

    def cases(self) -> list[tuple[str, str]]:
        return [("-", "generate")] + [(d.name, m) for d in self.setup.drafts for m in MODES[1:]]

    def run(self, draft_name: str, mode: str, new_tokens: int) -> Timing:
        target, prompt = self.setup.target, self.setup.prompt
        if mode == "generate":
            return time_generate(target, prompt, new_tokens)
        pair = next(d for d in self.setup.drafts if d.name == draft_name)
        if mode == "replay":
            return time_replay(target, pair, prompt, new_tokens)
        return time_recorded(target, pair, prompt, new_tokens, self.factory, self.artifact_dir)

    def warm_up(self, log) -> None:
        for draft_name, mode in self.cases():
            timing = self.run(draft_name, mode, WARMUP_TOKENS)
            log(f"  warm-up N={WARMUP_TOKENS} {draft_name:>6} {mode:<13} {timing.seconds:8.2f} s")

    def measure(self, new_tokens: int, repeats: int, log) -> dict[tuple[str, str], list[Timing]]:
        timings: dict[tuple[str, str], list[Timing]] = {case: [] for case in self.cases()}
        for repeat in range(repeats):
            for case in self.cases():  # interleaved: drift of the machine hits every mode alike
                timing = self.run(*case, new_tokens)
                timings[case].append(timing)
                log(f"  N={new_tokens} repeat {repeat + 1}/{repeats} {case[0]:>6} {case[1]:<13} "
                    f"{timing.seconds:8.2f} s")
        return timings


# ----------------------------------------------------------------------------------------- report

def make_row(draft: str, mode: str, new_tokens: int, timings: list[Timing]) -> Row:
    best = min(timings, key=lambda t: t.seconds)
    counts = best.accepted_counts
    replayed = mode != "generate"
    runs = [t.seconds for t in timings]
    return Row(draft, mode, new_tokens, runs, best.seconds, statistics.median(runs), new_tokens / best.seconds,
               1000.0 * best.seconds / new_tokens,
               (sum(counts) / len(counts) + 1.0) if counts else None,
               len(counts) if replayed else None,
               best.draft_ms / new_tokens if replayed else None,
               best.verify_ms / new_tokens if replayed else None)


def rows_for_length(new_tokens: int, timings: dict[tuple[str, str], list[Timing]]) -> list[Row]:
    reference = min(timings[("-", "generate")], key=lambda t: t.seconds)
    rows = []
    for (draft, mode), runs in timings.items():
        row = make_row(draft, mode, new_tokens, runs)
        row.vs_generate = reference.seconds / row.seconds
        row.equals_generate = all(t.output_ids == reference.output_ids for t in runs)
        rows.append(row)
    return rows


COLUMNS = ("draft", "mode", "new_tokens", "runs", "seconds", "tokens/s", "ms/token", "accept_len",
           "vs_gen", "=gen", "draft_ms/tok", "verify_ms/tok")


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table_lines(rows: list[Row]) -> list[str]:
    cells = [COLUMNS] + [
        (r.draft, r.mode, str(r.new_tokens), str(len(r.runs)), _fmt(r.seconds), _fmt(r.tokens_per_s, 1),
         _fmt(r.ms_per_token), _fmt(r.accept_length), _fmt(r.vs_generate), "yes" if r.equals_generate else "NO",
         _fmt(r.draft_ms_per_token), _fmt(r.verify_ms_per_token))
        for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in cells]
    lines.insert(1, "-" * len(lines[0]))
    return lines


def summary(rows: list[Row]) -> dict:
    """(b) recording cost per draft and length; (c) ms/token growth from the shortest to the longest length."""
    by_key = {(r.draft, r.mode, r.new_tokens): r for r in rows}
    lengths = sorted({r.new_tokens for r in rows})
    record_cost = {f"{d}@{n}": by_key[(d, "replay+record", n)].seconds / by_key[(d, "replay", n)].seconds
                   for (d, m, n) in by_key if m == "replay"}
    growth = {f"{d}/{m}": by_key[(d, m, lengths[-1])].ms_per_token / by_key[(d, m, lengths[0])].ms_per_token
              for (d, m, n) in by_key if n == lengths[0]}
    return {"record_seconds_over_plain": record_cost,
            f"ms_per_token_{lengths[-1]}_over_{lengths[0]}": growth}


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
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results path")
    parser.add_argument("--repeats", type=int, default=2,
                        help=f"timed runs per row for lengths < {SINGLE_RUN_FROM} (those >= run once)")
    return parser.parse_args(argv)


def environment() -> dict:
    return {"python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(), "num_steps": NUM_STEPS,
            "prompt_length": PROMPT_LENGTH, "target": TARGET_SPEC, "dtype": "fp32", "device": "cpu"}


def run_benchmark(lengths: tuple[int, ...], repeats: int, log) -> dict:
    with tempfile.TemporaryDirectory(prefix="replay_bench_") as tmp:
        root = Path(tmp)
        setup = build_setup(root / "models")
        url = f"sqlite:///{root / 'db' / 'bench.db'}"
        engine = store.make_engine(url)
        runner = Runner(setup, store.session_factory(engine), store.artifact_root(url))
        env = environment()
        env["aux_hf_indices"] = {d.name: list(d.wiring.aux_hf_indices) for d in setup.drafts}
        started = time.perf_counter()
        runner.warm_up(log)
        rows: list[Row] = []
        for new_tokens in lengths:
            runs = 1 if new_tokens >= SINGLE_RUN_FROM else repeats
            rows += rows_for_length(new_tokens, runner.measure(new_tokens, runs, log))
        engine.dispose()
    env["loadavg_end"] = os.getloadavg()
    env["total_seconds"] = time.perf_counter() - started
    return {"environment": env, "prompt": setup.prompt, "rows": [asdict(r) for r in rows], "summary": summary(rows)}


def order(rows: list[dict]) -> list[Row]:
    rank = {"-": 0, "copy": 1, "random": 2}
    return sorted((Row(**r) for r in rows), key=lambda r: (rank.get(r.draft, 9), MODES.index(r.mode), r.new_tokens))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(THREADS)
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    result = run_benchmark(QUICK_LENGTHS if args.quick else FULL_LENGTHS, max(1, args.repeats), log)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    env = result["environment"]
    print(f"replay bench: K={NUM_STEPS}, fp32 CPU, {env['threads']} threads, prompt {PROMPT_LENGTH} tokens, "
          f"load avg {env['loadavg_start'][0]:.2f} -> {env['loadavg_end'][0]:.2f}, "
          f"{env['total_seconds']:.0f} s timed")
    print("\n".join(table_lines(order(result["rows"])) + summary_lines(result["summary"])))
    print(f"\nJSON: {args.out}")
    mismatched = [r for r in result["rows"] if not r["equals_generate"]]
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
