"""The user-facing path on the bundled demo pair: what a replay costs from generate() to the store.

Modes, each on the same eval prompts, rotated in order across rounds (medians, min and max):
  generate   HF `generate()` greedy
  loop       a plain cached greedy loop (prefill, then one 1-token forward per token)
  replay     engine replay, recording off (`backend.engine.replay.replay`)
  record     engine replay, recording on, no database
  job        the job runner into SQLite (`backend.service.jobs.run_replay_job`): what the CLI and the
             dashboard run
Run with `PYTHONPATH=. python bench/replay_bench.py --demo` (this module does the work).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from backend.defaults import DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET
from backend.engine.loading import load_target
from backend.engine.preflight import load_checked_draft
from backend.engine.replay import ReplayConfig, output_ids_of, replay
from backend.service.database import open_database
from backend.service.jobs import run_replay_job
from backend.service.requests import ReplayRequest
from bench.gpu_check import generate, greedy_loop

MODES = ("generate", "loop", "replay", "record", "job")


def run_demo(
    prompts: int = 4, new_tokens: int = 256, rounds: int = 2, num_steps: int = 4, lengths=(256, 2048)
) -> dict:
    target = load_target(DEMO_TARGET, device="cpu", dtype="fp32")
    draft, report = load_checked_draft(DEMO_DRAFTS / "final", target)
    records = [json.loads(line) for line in DEMO_EVAL.read_text().splitlines()[:prompts]]
    prompt_ids = [r["input_ids"][: r["n_prompt_tokens"]] for r in records]
    folder = tempfile.mkdtemp(prefix="demo_bench_")
    database = open_database(f"sqlite:///{folder}/bench.db")

    def job(prompt, tokens):
        request = ReplayRequest(
            str(DEMO_TARGET),
            str(DEMO_DRAFTS / "final"),
            prompt_ids=tuple(prompt),
            num_steps=num_steps,
            max_new_tokens=tokens,
        )
        return run_replay_job(database, target, draft, request, report.wiring, prompt).output_ids

    run = {
        "generate": lambda p, n: generate(target, p, n),
        "loop": lambda p, n: greedy_loop(target, p, n),
        "replay": lambda p, n: output_ids_of(
            list(replay(target, draft, p, report.wiring, ReplayConfig(num_steps, n, record=False)))
        ),
        "record": lambda p, n: output_ids_of(
            list(replay(target, draft, p, report.wiring, ReplayConfig(num_steps, n, record=True)))
        ),
        "job": job,
    }
    for mode in MODES:  # warm up
        run[mode](prompt_ids[0], 16)
    speeds: dict[str, list[float]] = {mode: [] for mode in MODES}
    outputs: dict[str, list] = {}
    for round_number in range(rounds):
        order = MODES[round_number % len(MODES) :] + MODES[: round_number % len(MODES)]
        for mode in order:
            started, tokens, produced = time.perf_counter(), 0, []
            for prompt in prompt_ids:
                output = run[mode](prompt, new_tokens)
                tokens += len(output)
                produced.append(output)
            speeds[mode].append(tokens / (time.perf_counter() - started))
            outputs[mode] = produced
    medians = {mode: statistics.median(values) for mode, values in speeds.items()}
    rows = [
        {
            "mode": mode,
            "tokens_per_s_median": medians[mode],
            "min": min(speeds[mode]),
            "max": max(speeds[mode]),
            "vs_generate": medians[mode] / medians["generate"],
            "vs_replay": medians[mode] / medians["replay"],
            "equals_generate": outputs[mode] == outputs["generate"],
        }
        for mode in MODES
    ]
    per_token = {}
    for tokens in lengths:  # flat cost per emitted token: the job runner at a short and a long length
        request = ReplayRequest(
            str(DEMO_TARGET),
            str(DEMO_DRAFTS / "final"),
            prompt_ids=tuple(prompt_ids[0]),
            num_steps=num_steps,
            max_new_tokens=tokens,
        )
        started = time.perf_counter()
        outcome = run_replay_job(database, target, draft, request, report.wiring, prompt_ids[0])
        seconds = time.perf_counter() - started
        per_token[tokens] = {
            "ms_per_token": 1000 * seconds / len(outcome.output_ids),
            "ms_per_step": 1000 * seconds / max(1, len(outcome.steps)),
            "accept_length": outcome.metrics["mean_accept_length"],
        }
    database.close()
    return {
        "rows": rows,
        "ms_per_token_job": per_token,
        "prompts": prompts,
        "new_tokens": new_tokens,
        "rounds": rounds,
        "K": num_steps,
        "threads": torch.get_num_threads(),
    }


def table(result: dict) -> str:
    lines = [
        f"demo pair, K={result['K']}, {result['prompts']} eval prompts x {result['new_tokens']} new tokens, "
        f"{result['rounds']} rounds in rotated order, {result['threads']} threads",
        f"{'mode':<9} {'tok/s median':>12} {'min':>7} {'max':>7} {'x generate':>10} {'x replay':>9} equal",
    ]
    for row in result["rows"]:
        lines.append(
            f"{row['mode']:<9} {row['tokens_per_s_median']:>12.1f} {row['min']:>7.1f} {row['max']:>7.1f} "
            f"{row['vs_generate']:>10.2f} {row['vs_replay']:>9.2f} {row['equals_generate']}"
        )
    short, long = sorted(result["ms_per_token_job"])
    a, b = result["ms_per_token_job"][short], result["ms_per_token_job"][long]
    lines.append(
        f"job runner at {short} / {long} new tokens: {a['ms_per_token']:.2f} / {b['ms_per_token']:.2f} ms per token "
        f"(ratio {b['ms_per_token'] / a['ms_per_token']:.2f}), {a['ms_per_step']:.2f} / {b['ms_per_step']:.2f} ms "
        f"per verify step (ratio {b['ms_per_step'] / a['ms_per_step']:.2f}), accept length "
        f"{a['accept_length']:.2f} / {b['accept_length']:.2f}"
    )
    return "\n".join(lines)


def main(out: Path, rounds: int, new_tokens: int) -> int:
    result = run_demo(rounds=rounds, new_tokens=new_tokens)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(table(result))
    print(f"JSON: {out}")
    return 0 if all(row["equals_generate"] for row in result["rows"]) else 1
