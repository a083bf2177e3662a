"""vLLM's and llama.cpp's own speed on the pair beside transformers' generate() and SpecLens's replay,
in one run.

    PYTHONPATH=. .venv/bin/python bench/vllm_bench.py [--prompts 4] [--max-new-tokens 96] [--engines vllm,llamacpp]

Rows, each over the same first N prompts of the samples file, one request at a time, greedy, fp32 CPU:

  generate        transformers `model.generate(do_sample=False)` on the target (this venv)
  replay          backend.engine.replay.replay(record=False) drained in memory: the engine alone
  job runner      backend.service.jobs.run_replay(record=True): the CLI's and the dashboard's path (SQLite)
  vLLM            vLLM's OpenAI server (.venv-vllm), the target alone, /v1/completions on token ids
  vLLM + EAGLE-3  the same server with the draft (`--speculative-config`, K = --steps)
  llama.cpp       llama-server (scripts/install-llamacpp.sh) on the F32 GGUF of the target alone, /completion
  llama.cpp + EAGLE-3  the same with the draft (`--spec-type draft-eagle3`, K = --steps), -t --llamacpp-threads

tokens/s = new tokens / wall seconds of the requests (prefill included; vLLM: the HTTP round trip
included, its start-up not; llama.cpp: the GGUF conversion, cached, not). vs generate = the row's tokens/s / generate's. accept length: mean over
verify steps of a + 1 (vLLM: 1 + accepted / drafts; llama.cpp: its trace's verify steps). Ratios are only meaningful within one run: this
machine is shared and noisy (the header prints the load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

REAL = Path("demo/smollm2")


def timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def in_process_rows(args, prompts: list[list[int]]) -> list[dict]:
    import torch

    from backend.engine.replay import ReplayConfig, replay
    from backend.run.records import StepRecord
    from backend.run.request import ReplayRequest
    from backend.service import models
    from backend.service.jobs import run_replay

    torch.set_num_threads(2)
    target, draft, report = models.pair(args.target, args.draft)
    wiring = report.wiring
    rows = {"generate": [0, 0.0, None], "replay": [0, 0.0, []], "job runner": [0, 0.0, []]}
    with tempfile.TemporaryDirectory() as scratch:
        db = f"sqlite:///{scratch}/bench.db"
        for ids in prompts:
            with torch.inference_mode():
                seconds, out = timed(
                    lambda ids=ids: target.model.generate(
                        torch.tensor([ids]), do_sample=False, max_new_tokens=args.max_new_tokens
                    )
                )
            rows["generate"][0] += out.shape[1] - len(ids)
            rows["generate"][1] += seconds
            config = ReplayConfig(args.steps, args.max_new_tokens, record=False)
            seconds, records = timed(
                lambda ids=ids, config=config: list(replay(target, draft, ids, wiring, config))
            )
            steps = [r for r in records if isinstance(r, StepRecord)]
            rows["replay"][0] += 1 + sum(len(s.committed_ids) for s in steps)
            rows["replay"][1] += seconds
            rows["replay"][2] += [s.accepted_count + 1 for s in steps]
            request = ReplayRequest(
                args.target, args.draft, prompt_ids=tuple(ids), num_steps=args.steps,
                max_new_tokens=args.max_new_tokens, record=True,
            )  # fmt: skip
            seconds, outcome = timed(lambda request=request: run_replay(request, db))
            rows["job runner"][0] += len(outcome.output_ids)
            rows["job runner"][1] += seconds
            rows["job runner"][2] += [s.accepted_count + 1 for s in outcome.steps]
    return [
        {
            "row": name,
            "tokens": tokens,
            "seconds": seconds,
            "accept_length": sum(lengths) / len(lengths) if lengths else None,
        }
        for name, (tokens, seconds, lengths) in rows.items()
    ]


def vllm_rows(args, prompts: list[list[int]]) -> list[dict]:
    from backend.service.vllm_server import complete, launched_server, served_model

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, draft in (("vLLM", None), ("vLLM + EAGLE-3", args.draft)):
            with launched_server(
                args.target, draft, args.steps, Path(scratch) / f"{len(rows)}.log"
            ) as server:
                model = served_model(server.url)
                complete(server.url, model, prompts[0], 8, 600)  # warm-up
                tokens, seconds, steps, accepted = 0, 0.0, 0, 0
                for ids in prompts:
                    took, exchange = timed(
                        lambda ids=ids, model=model: complete(
                            server.url, model, ids, args.max_new_tokens, 600
                        )
                    )
                    response = exchange["response"]
                    tokens += response["usage"]["completion_tokens"]
                    seconds += took
                    spec = (response.get("metrics") or {}).get("speculative_decoding")
                    if spec:
                        steps += spec["num_spec_steps"]
                        accepted += spec["num_accepted_draft_tokens"]
                rows.append(
                    {
                        "row": name,
                        "tokens": tokens,
                        "seconds": seconds,
                        "accept_length": 1 + accepted / steps if steps else None,
                        "startup_seconds": round(server.seconds_to_ready, 1),
                    }
                )
    return rows


def llamacpp_rows(args, prompts: list[list[int]]) -> list[dict]:
    from backend.service.llamacpp_server import (
        ServerFlags,
        complete,
        converted,
        launched_server,
        log_size,
        served_steps,
    )

    target_gguf, _ = converted(args.target)
    draft_gguf, _ = converted(args.draft, args.target)
    flags = ServerFlags(context=2048, threads=args.llamacpp_threads)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, draft in (("llama.cpp", None), ("llama.cpp + EAGLE-3", draft_gguf)):
            log = Path(scratch) / f"{len(rows)}.log"
            with launched_server(target_gguf, draft, args.steps, log, flags) as server:
                complete(server.url, prompts[0], 8, 600)  # warm-up
                tokens, seconds, lengths = 0, 0.0, []
                for number, ids in enumerate(prompts):
                    offset = log_size(log)
                    took, exchange = timed(
                        lambda ids=ids: complete(server.url, ids, args.max_new_tokens, 600)
                    )
                    tokens += exchange["response"]["timings"]["predicted_n"]
                    seconds += took
                    if draft is not None:
                        lengths += [a + 1 for a in served_steps(exchange, log, offset, number)["per_step"]]
                rows.append(
                    {
                        "row": name,
                        "tokens": tokens,
                        "seconds": seconds,
                        "accept_length": sum(lengths) / len(lengths) if lengths else None,
                        "startup_seconds": round(server.seconds_to_ready, 1),
                    }
                )
    return rows


def main() -> None:
    from demo.make_data import read_jsonl

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", default=str(REAL / "target"))
    parser.add_argument("--draft", default=str(REAL / "drafts" / "final"))
    parser.add_argument("--samples", default=str(REAL / "data" / "eval.jsonl"))
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--engines", default="vllm,llamacpp", help="which engines run beside the replay")
    parser.add_argument("--llamacpp-threads", type=int, default=2, help="llama-server -t (default 2)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/vllm_bench.json"))
    args = parser.parse_args()
    prompts = [s["input_ids"][: s["n_prompt_tokens"]] for s in read_jsonl(Path(args.samples))[: args.prompts]]
    load_before = os.getloadavg()
    engines = {e.strip() for e in args.engines.split(",") if e.strip()}
    rows = in_process_rows(args, prompts)
    rows += vllm_rows(args, prompts) if "vllm" in engines else []
    rows += llamacpp_rows(args, prompts) if "llamacpp" in engines else []
    load_after = os.getloadavg()
    base = next(r for r in rows if r["row"] == "generate")
    base_rate = base["tokens"] / base["seconds"]
    print(
        f"{args.target} + {args.draft}: {len(prompts)} prompts, {args.max_new_tokens} new tokens, K={args.steps}, "
        f"greedy fp32 CPU; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    )
    print(f"{'row':<20} {'tokens':>6} {'seconds':>8} {'tokens/s':>9} {'vs generate':>11} {'accept len':>10}")
    for r in rows:
        rate = r["tokens"] / r["seconds"]
        r["tokens_per_second"], r["vs_generate"] = rate, rate / base_rate
        al = "" if r["accept_length"] is None else f"{r['accept_length']:.3f}"
        print(
            f"{r['row']:<20} {r['tokens']:>6} {r['seconds']:>8.2f} {rate:>9.2f} {rate / base_rate:>11.2f} {al:>10}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"rows": rows, "load": [load_before, load_after], "args": vars(args)}, indent=1, default=str
        )
    )


if __name__ == "__main__":
    main()
