"""The user-facing path on a bundled pair (the active one: SmolLM2 once set up, else the toy): what a
replay costs from generate() to the store, and how close the job runner comes to the pair's ideal.

Modes, each on the same eval prompts, rotated in order across rounds (medians, min and max):
  generate   HF `generate()` greedy
  loop       a plain cached greedy loop (prefill, then one 1-token forward per token)
  replay     engine replay, recording off (`backend.engine.replay.replay`)
  record     engine replay, recording on, no database
  job        the job runner into SQLite (`backend.service.jobs.run_plan` of a resolved request): what the CLI and the
             dashboard run (the target's lean forward, backend/target/lean_target.py, the default)
  job_hf     the same with SPECLENS_LEAN_TARGET=0: transformers' own forward on a DynamicCache
  tree       tree replay (SGLang's steps / topk / draft tokens, default 3 / 4 / 8), recording off
  tree_record  tree replay, recording on, no database
  tree_job   the job runner into SQLite with the tree
Two ratios are printed under the table (issue 40's bars: >= 0.9 and >= 0.85):
  job / replay    the job runner's tokens/s over the bare replay's: what recording and the store cost
  job / ideal     the job runner's speed-up over a one-token decode (its tokens/s x t1), over the pair's
                  ideal speed-up = accept length x t1 / t_step, where t1 is one 1-token forward of the target
                  (median over the loop's decode steps, the target's own forward as the replay runs it)
                  and t_step the mean time of one verify step with its drafts (the engine's own timers,
                  StepRecord.draft_ms + verify_ms, in the bare replay): what everything outside the
                  models' forwards costs
With the vLLM venv (.venv-vllm) present, vLLM's own tokens/s (the target alone, and with the draft) on
the same prompts join the table (bench/vllm_bench.py's server rows). A second table follows: `evaluate`
over 16 prompts one at a time and batched, beside vLLM given all 16 at once (bench/batch_bench.py).
Run with `PYTHONPATH=. python bench/replay_bench.py --demo [--pair toy|smollm2]` (this module does the work).
"""

from __future__ import annotations

import atexit
import json
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from backend.defaults import BundledPair, active_pair
from backend.engine.loading import load_target
from backend.engine.preflight import load_checked_draft
from backend.engine.replay import ReplayConfig, output_ids_of, replay
from backend.run.records import StepRecord
from backend.run.request import ReplayRequest
from backend.service.database import open_database
from backend.service.jobs import run_plan
from backend.service.plan import resolve
from backend.target.target_runner import TransformersRunner
from bench.gpu_check import generate, greedy_loop

MODES = ("generate", "loop", "replay", "record", "job", "job_hf", "tree", "tree_record", "tree_job")
TREE = (3, 4, 8)  # steps, topk, num_draft_tokens


def one_token_ms(target, prompt: list[int], tokens: int) -> float:
    """Median wall time of one 1-token forward of the target after the prompt's prefill (its own runner,
    the lean forward the replay verifies with)."""
    runner = target.runner
    times = []
    with torch.inference_mode():
        cache = runner.new_cache()
        logits = runner.forward(torch.tensor([prompt], device=target.device), cache, 0).logits
        token = int(logits[0, -1].argmax())
        for position in range(len(prompt), len(prompt) + tokens):
            started = time.perf_counter()
            logits = runner.forward(torch.tensor([[token]], device=target.device), cache, position).logits
            token = int(logits[0, -1].argmax())
            times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def run_demo(
    prompts: int = 4,
    new_tokens: int = 256,
    rounds: int = 2,
    num_steps: int = 4,
    lengths=(256, 2048),
    tree: tuple[int, int, int] = TREE,
    pair: BundledPair | None = None,
) -> dict:
    pair = pair or active_pair().pair
    target_dir, draft_dir = pair.target, pair.drafts / "final"
    target = load_target(target_dir, device="cpu", dtype="fp32")
    draft, report = load_checked_draft(draft_dir, target)
    records = [json.loads(line) for line in pair.eval_set.read_text().splitlines()[:prompts]]
    prompt_ids = [r["input_ids"][: r["n_prompt_tokens"]] for r in records]
    folder = tempfile.mkdtemp(prefix="demo_bench_")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # 61 MB a run, tests included
    database = open_database(f"sqlite:///{folder}/bench.db")

    hf_target = replace(target, runner=TransformersRunner(target.model))  # SPECLENS_LEAN_TARGET=0's runner

    def job(prompt, tokens, shape=None, on=target):
        steps, topk, draft_tokens = shape or (num_steps, None, None)
        request = ReplayRequest(
            str(target_dir),
            str(draft_dir),
            prompt_ids=tuple(prompt),
            num_steps=steps,
            max_new_tokens=tokens,
            topk=topk,
            num_draft_tokens=draft_tokens,
        )
        outcome = run_plan(database, on, draft, resolve(request, on, draft))
        return outcome.output_ids, len(outcome.steps)

    step_ms: list[float] = []  # draft + verify of each chain step of the bare replay (the ideal's t_step)

    def engine(prompt, tokens, record, shape=None):
        steps, topk, draft_tokens = shape or (num_steps, 1, None)
        config = ReplayConfig(steps, tokens, record=record, topk=topk, num_draft_tokens=draft_tokens)
        records = list(replay(target, draft, prompt, report.wiring, config))
        if shape is None and not record:
            step_ms.extend(r.draft_ms + r.verify_ms for r in records if isinstance(r, StepRecord))
        return output_ids_of(records), len(records) - 1

    run = {
        "generate": lambda p, n: (generate(target, p, n), None),
        "loop": lambda p, n: (greedy_loop(target, p, n), None),
        "replay": lambda p, n: engine(p, n, False),
        "record": lambda p, n: engine(p, n, True),
        "job": job,
        "job_hf": lambda p, n: job(p, n, on=hf_target),
        "tree": lambda p, n: engine(p, n, False, tree),
        "tree_record": lambda p, n: engine(p, n, True, tree),
        "tree_job": lambda p, n: job(p, n, tree),
    }
    for mode in MODES:  # warm up
        run[mode](prompt_ids[0], 16)
    step_ms.clear()
    speeds: dict[str, list[float]] = {mode: [] for mode in MODES}
    outputs: dict[str, list] = {}
    verify_steps: dict[str, int | None] = {}
    for round_number in range(rounds):
        order = MODES[round_number % len(MODES) :] + MODES[: round_number % len(MODES)]
        for mode in order:
            started, tokens, produced, steps = time.perf_counter(), 0, [], 0
            for prompt in prompt_ids:
                output, count = run[mode](prompt, new_tokens)
                tokens += len(output)
                produced.append(output)
                steps = None if count is None else steps + count
            speeds[mode].append(tokens / (time.perf_counter() - started))
            outputs[mode] = produced
            # accept length: tokens after each prefill's first token, per verify step
            verify_steps[mode] = None if steps is None else (tokens - len(prompt_ids)) / steps
    medians = {mode: statistics.median(values) for mode, values in speeds.items()}
    rows = [
        {
            "mode": mode,
            "tokens_per_s_median": medians[mode],
            "min": min(speeds[mode]),
            "max": max(speeds[mode]),
            "vs_generate": medians[mode] / medians["generate"],
            "vs_replay": medians[mode] / medians["replay"],
            "accept_length": verify_steps[mode],
            "equals_generate": outputs[mode] == outputs["generate"],
        }
        for mode in MODES
    ]
    per_token: dict[str, dict] = {"chain": {}, "tree": {}}
    for name, shape in (("chain", (num_steps, None, None)), ("tree", tree)):
        for tokens in lengths:  # flat cost per emitted token: the job runner, short and long
            request = ReplayRequest(
                str(target_dir),
                str(draft_dir),
                prompt_ids=tuple(prompt_ids[0]),
                num_steps=shape[0],
                max_new_tokens=tokens,
                topk=shape[1],
                num_draft_tokens=shape[2],
            )
            started = time.perf_counter()
            outcome = run_plan(database, target, draft, resolve(request, target, draft))
            seconds = time.perf_counter() - started
            per_token[name][tokens] = {
                "ms_per_token": 1000 * seconds / len(outcome.output_ids),
                "ms_per_step": 1000 * seconds / max(1, len(outcome.steps)),
                "accept_length": outcome.metrics.mean_accept_length,
            }
    database.close()
    t1 = statistics.median(one_token_ms(target, p, min(new_tokens, 64)) for p in prompt_ids)
    t_step = statistics.mean(step_ms)
    chain_al = next(r["accept_length"] for r in rows if r["mode"] == "replay")
    ideal = chain_al * t1 / t_step
    job = next(r for r in rows if r["mode"] == "job")
    achieved = job["tokens_per_s_median"] * t1 / 1000  # over a 1-token loop at t1 ms per token
    return {
        "pair": pair.key,
        "target": str(target_dir),
        "draft": str(draft_dir),
        "ideal": {
            "definition": "accept length x t1 / t_step: t1 = median one 1-token target forward (ms), t_step = "
            "mean draft + verify ms of one chain step in the bare replay",
            "accept_length": chain_al,
            "t1_ms": t1,
            "t_step_ms": t_step,
            "ideal_speedup": ideal,
            "job_speedup": achieved,
            "job_over_ideal": achieved / ideal,
            "job_over_replay": job["vs_replay"],
        },
        "rows": rows,
        "ms_per_token_job": per_token["chain"],
        "ms_per_token_tree_job": per_token["tree"],
        "tree": {"steps": tree[0], "topk": tree[1], "num_draft_tokens": tree[2]},
        "prompts": prompts,
        "new_tokens": new_tokens,
        "rounds": rounds,
        "K": num_steps,
        "threads": torch.get_num_threads(),
    }


def table(result: dict) -> str:
    tree = result.get("tree", {})
    lines = [
        f"{result.get('pair', 'demo')} pair ({result.get('target', '')} + {result.get('draft', '')}), chain K={result['K']}, tree steps/topk/N={tree.get('steps')}/{tree.get('topk')}/"
        f"{tree.get('num_draft_tokens')}, {result['prompts']} eval prompts x {result['new_tokens']} new tokens, "
        f"{result['rounds']} rounds in rotated order, {result['threads']} threads",
        f"{'mode':<12} {'tok/s median':>12} {'min':>7} {'max':>7} {'x generate':>10} {'x replay':>9} "
        f"{'AL':>5} equal",
    ]
    for row in result["rows"]:
        al = "" if row.get("accept_length") is None else f"{row['accept_length']:.2f}"
        lines.append(
            f"{row['mode']:<12} {row['tokens_per_s_median']:>12.1f} {row['min']:>7.1f} {row['max']:>7.1f} "
            f"{row['vs_generate']:>10.2f} {row['vs_replay']:>9.2f} {al:>5} {row['equals_generate']}"
        )
    for name, key in (
        ("job runner, chain", "ms_per_token_job"),
        ("job runner, tree", "ms_per_token_tree_job"),
    ):
        if key not in result:
            continue
        short, long = sorted(result[key], key=int)
        a, b = result[key][short], result[key][long]
        lines.append(
            f"{name} at {short} / {long} new tokens: {a['ms_per_token']:.2f} / {b['ms_per_token']:.2f} ms per "
            f"token (ratio {b['ms_per_token'] / a['ms_per_token']:.2f}), {a['ms_per_step']:.2f} / "
            f"{b['ms_per_step']:.2f} ms per verify step (ratio {b['ms_per_step'] / a['ms_per_step']:.2f}), "
            f"accept length {a['accept_length']:.2f} / {b['accept_length']:.2f}"
        )
    for row in result.get("vllm", []):
        lines.append(
            f"{row['row']:<16} {row['tokens'] / row['seconds']:>8.1f} tok/s over {row['tokens']} tokens "
            f"(x generate {row['tokens'] / row['seconds'] / result['generate_tokens_per_s']:.2f}, AL "
            f"{'n/a' if row['accept_length'] is None else format(row['accept_length'], '.2f')}, start-up "
            f"{row['startup_seconds']} s; vLLM's own server, same prompts, {result['vllm_new_tokens']} new tokens)"
        )
    if "vllm_skipped" in result:
        lines.append(f"vLLM rows: {result['vllm_skipped']}")
    ideal = result.get("ideal")
    if ideal:
        lines.append(
            f"ideal speed-up = AL {ideal['accept_length']:.2f} x t1 {ideal['t1_ms']:.2f} ms / t_step "
            f"{ideal['t_step_ms']:.2f} ms = {ideal['ideal_speedup']:.2f}x a 1-token decode at t1; the job runner "
            f"reaches {ideal['job_speedup']:.2f}x (its tokens/s x t1): job / ideal = {ideal['job_over_ideal']:.2f} "
            f"(bar 0.85), job / replay = {ideal['job_over_replay']:.2f} (bar 0.90)"
        )
    return "\n".join(lines)


def vllm_speed(result: dict, prompts: int, new_tokens: int, num_steps: int) -> None:
    """vLLM's own tokens/s on the same pair and prompts, when the vLLM venv is there (bench/vllm_bench.py)."""
    from argparse import Namespace

    from backend import BadInput
    from backend.service.vllm_server import vllm_python
    from bench import vllm_bench

    try:
        vllm_python()
    except BadInput as missing:
        result["vllm_skipped"] = str(missing)
        return
    records = [json.loads(line) for line in Path(result["eval_set"]).read_text().splitlines()[:prompts]]
    ids = [r["input_ids"][: r["n_prompt_tokens"]] for r in records]
    args = Namespace(
        target=result["target"], draft=result["draft"], steps=num_steps, max_new_tokens=new_tokens
    )
    result["vllm"] = vllm_bench.vllm_rows(args, ids)
    result["vllm_new_tokens"] = new_tokens


def main(out: Path, rounds: int, new_tokens: int, pair: BundledPair | None = None, vllm: bool = True) -> int:
    pair = pair or active_pair().pair
    big = pair.key != "toy"  # the real pair: 30 layers on 2 cores; shorter runs, same modes
    result = run_demo(
        rounds=rounds, new_tokens=min(new_tokens, 96) if big else new_tokens,
        lengths=(96, 512) if big else (256, 2048), pair=pair,
    )  # fmt: skip
    result["eval_set"] = str(pair.eval_set)
    result["generate_tokens_per_s"] = next(
        r["tokens_per_s_median"] for r in result["rows"] if r["mode"] == "generate"
    )
    if vllm:
        vllm_speed(result, result["prompts"], result["new_tokens"], result["K"])
    from bench import batch_bench

    # issue 56: the dataset path, evaluate one at a time and batched, beside vLLM given all at once
    result["dataset"] = batch_bench.run(pair, 16, result["new_tokens"], vllm)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(table(result))
    print(batch_bench.table(result["dataset"]))
    print(f"JSON: {out}")
    return 0 if all(row["equals_generate"] for row in result["rows"]) else 1
