"""Dataset replay throughput (issue 56): `evaluate` over N prompts one at a time and batched, beside
vLLM's CPU build given all N at once.

Rows, on the same first N eval prompts of the pair, K and new tokens, greedy, fp32 CPU, into a fresh
SQLite database each (recording on: what `evaluate` stores):
  evaluate, 1 at a time   backend.service.evaluate.evaluate with Where(batch=1)
  evaluate, batched       the same with Where(batch=N): one batch (backend/service/batch_jobs.py)
  vLLM + EAGLE-3, N at once  vLLM's OpenAI server with the draft, all N /v1/completions sent together
tokens/s = all new tokens / the wall seconds of the whole set (model loading excluded: the pair is
loaded before the clock starts; vLLM's start-up excluded). The outputs of the two evaluate rows are
compared run by run (same tokens: `same`). Ratios only mean something within one run.

Run alone: `PYTHONPATH=. .venv/bin/python bench/batch_bench.py [--prompts 16] [--tokens 96] [--no-vllm]`;
`bench/replay_bench.py --demo` runs it after its per-request table.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def evaluate_rows(pair, prompts: int, tokens: int, num_steps: int = 4) -> list[dict]:
    from backend.data.samples import read_jsonl
    from backend.engine.loading import read_target_config
    from backend.run.request import ReplayRequest
    from backend.service import evaluate, models
    from backend.service.runs import get_run

    draft = str(pair.drafts / "final")
    vocab = read_target_config(str(pair.target)).vocab_size
    samples = read_jsonl(pair.eval_set, vocab)[0][:prompts]
    for index, sample in enumerate(samples):
        sample.index = index
    template = ReplayRequest(
        str(pair.target),
        draft,
        prompt_ids=tuple(samples[0].prompt_ids),
        num_steps=num_steps,
        max_new_tokens=tokens,
    )
    plan = evaluate.Plan(template, [draft], samples, str(pair.eval_set), {draft: "final"})
    models.pair(str(pair.target), draft)  # loaded before the clock starts
    rows, outputs = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for name, batch in (("evaluate, 1 at a time", 1), ("evaluate, batched", prompts)):
            db_url = f"sqlite:///{scratch}/{batch}.db"
            started = time.perf_counter()
            result = evaluate.evaluate(db_url, plan, resume=False, where=evaluate.Where(batch=batch))
            seconds = time.perf_counter() - started
            (row,) = result["drafts"]
            runs = [get_run(db_url, r["run_id"]) for r in row["per_sample"]]
            outputs.append([run.output_ids for run in runs])
            rows.append(
                {
                    "row": name,
                    "batch": batch,
                    "tokens": row["tokens"],
                    "seconds": seconds,
                    "accept_length": row["pooled_accept_length"],
                }
            )
    rows[1]["same"] = outputs[0] == outputs[1]
    return rows


def vllm_batched_row(pair, prompts: int, tokens: int, num_steps: int = 4) -> dict:
    """vLLM's server with the draft, all prompts sent at once (it batches them)."""
    from backend.data.samples import read_jsonl
    from backend.engine.loading import read_target_config
    from backend.service.vllm_server import complete, launched_server, served_model

    vocab = read_target_config(str(pair.target)).vocab_size
    ids = [s.prompt_ids for s in read_jsonl(pair.eval_set, vocab)[0][:prompts]]
    with tempfile.TemporaryDirectory() as scratch:
        with launched_server(
            str(pair.target), str(pair.drafts / "final"), num_steps, Path(scratch) / "v.log"
        ) as server:
            model = served_model(server.url)
            complete(server.url, model, ids[0], 8, 600)  # warm-up
            started = time.perf_counter()
            with ThreadPoolExecutor(len(ids)) as pool:
                exchanges = list(pool.map(lambda p: complete(server.url, model, p, tokens, 900), ids))
            seconds = time.perf_counter() - started
    steps = accepted = produced = 0
    for exchange in exchanges:
        response = exchange["response"]
        produced += response["usage"]["completion_tokens"]
        spec = (response.get("metrics") or {}).get("speculative_decoding") or {}
        steps += spec.get("num_spec_steps", 0)
        accepted += spec.get("num_accepted_draft_tokens", 0)
    return {
        "row": f"vLLM + EAGLE-3, {len(ids)} at once",
        "batch": len(ids),
        "tokens": produced,
        "seconds": seconds,
        "accept_length": 1 + accepted / steps if steps else None,
    }


def run(pair, prompts: int = 16, tokens: int = 96, vllm: bool = True) -> dict:
    load = os.getloadavg()
    rows = evaluate_rows(pair, prompts, tokens)
    if vllm:
        from backend import BadInput
        from backend.service.vllm_server import vllm_python

        try:
            vllm_python()
            rows.append(vllm_batched_row(pair, prompts, tokens))
        except BadInput as missing:
            rows.append({"row": "vLLM + EAGLE-3", "skipped": str(missing)})
    for row in rows:
        if row.get("seconds"):
            row["tokens_per_s"] = row["tokens"] / row["seconds"]
    one = rows[0]["tokens_per_s"]
    for row in rows:
        if row.get("tokens_per_s"):
            row["vs_one_at_a_time"] = row["tokens_per_s"] / one
    return {
        "pair": pair.key,
        "prompts": prompts,
        "new_tokens": tokens,
        "K": 4,
        "load_before": load,
        "load_after": os.getloadavg(),
        "rows": rows,
    }


def table(result: dict) -> str:
    lines = [
        f"dataset replay: {result['prompts']} prompts x {result['new_tokens']} new tokens, K = {result['K']}, "
        f"pair {result['pair']}; load average before {result['load_before'][0]:.2f}, after {result['load_after'][0]:.2f}",
        f"{'row':32s} {'batch':>5s} {'tokens':>6s} {'seconds':>8s} {'tok/s':>7s} {'vs 1-at-a-time':>14s} {'AL':>5s}  same",
    ]
    for row in result["rows"]:
        if "skipped" in row:
            lines.append(f"{row['row']:32s} skipped: {row['skipped']}")
            continue
        lines.append(
            f"{row['row']:32s} {row['batch']:5d} {row['tokens']:6d} {row['seconds']:8.1f} {row['tokens_per_s']:7.1f} "
            f"{row['vs_one_at_a_time']:14.2f} {row['accept_length'] or 0:5.2f}  {row.get('same', '')}"
        )
    batched = next(r for r in result["rows"] if r["row"] == "evaluate, batched")
    vllm = next((r for r in result["rows"] if r["row"].startswith("vLLM") and "tokens_per_s" in r), None)
    if vllm:
        lines.append(
            f"batched evaluate / vLLM {vllm['batch']} at once: {batched['tokens_per_s'] / vllm['tokens_per_s']:.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from backend.defaults import active_pair

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--no-vllm", action="store_true")
    parser.add_argument("--out", default="bench/results/batch_bench.json")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    result = run(active_pair().pair, args.prompts, args.tokens, not args.no_vllm)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, default=str))
    print(table(result))
    return 0 if result["rows"][1].get("same") else 1


if __name__ == "__main__":
    raise SystemExit(main())
