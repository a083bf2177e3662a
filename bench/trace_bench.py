"""The replay over traces against today's batched `evaluate` (issue 67): several drafts over the same
prompts, the target computed once per sample.

Rows, on the first N eval prompts of the SmolLM2 pair, K, new tokens, greedy chains, fp32 CPU, each into
a fresh SQLite database (recording on, as `evaluate` stores):
  evaluate --via step     backend.service.evaluate.evaluate, batched (a target verify forward per step)
  evaluate --via trace    the same plan with via="trace": the traces captured once (the first draft
                          pays it: its own row, `trace capture`), then every draft replays over them
The pair is loaded before the clock starts. Per draft the two paths' runs are compared step by step:
`same steps` counts verify steps with the same drafted tokens and accepted count (a tree's: the same
accepted path too); a step that differs
is named with whether the step replay recorded a near-tie on that verify row (docs/reference.md §7).

Run: `PYTHONPATH=. .venv/bin/python bench/trace_bench.py [--prompts 16] [--tokens 96] [--steps 4]`.
Compare ratios within one run only; this machine is noisy.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

DRAFTS = ("final", "epoch1", "miswired")


def run(
    prompts: int, tokens: int, num_steps: int, topk: int = 1, draft_tokens: int | None = None
) -> list[dict]:
    from backend.data.samples import read_jsonl
    from backend.defaults import SMOLLM2
    from backend.engine.loading import read_target_config
    from backend.run.request import ReplayRequest
    from backend.service import evaluate, models
    from backend.service.runs import get_run_with_steps

    target = str(SMOLLM2 / "target")
    eval_set = SMOLLM2 / "data" / "eval.jsonl"
    drafts = [str(SMOLLM2 / "drafts" / name) for name in DRAFTS]
    vocab = read_target_config(target).vocab_size
    samples = read_jsonl(eval_set, vocab)[0][:prompts]
    for index, sample in enumerate(samples):
        sample.index = index
    for draft in drafts:
        models.pair(target, draft)  # loaded before the clock starts
    rows, stored = [], {}
    with tempfile.TemporaryDirectory() as scratch:
        for via in ("step", "trace"):
            template = ReplayRequest(
                target, drafts[0], prompt_ids=tuple(samples[0].prompt_ids), num_steps=num_steps,
                max_new_tokens=tokens, via=via, topk=topk, num_draft_tokens=draft_tokens,
            )  # fmt: skip
            plan = evaluate.Plan(
                template, drafts, samples, str(eval_set), dict(zip(drafts, DRAFTS, strict=True))
            )
            db_url = f"sqlite:///{Path(scratch) / via}.db"
            seen = []

            def progress(_fraction, message, seen=seen):
                if message.startswith(("final: capturing", "capturing")) and not seen:
                    seen.append(time.perf_counter())

            started = time.perf_counter()
            result = evaluate.evaluate(
                db_url, plan, resume=False, progress=progress, where=evaluate.Where(batch=prompts)
            )
            seconds = time.perf_counter() - started
            for draft_row, draft in zip(result["drafts"], drafts, strict=True):
                stored[(via, draft)] = [
                    get_run_with_steps(db_url, r["run_id"]) for r in draft_row["per_sample"]
                ]
            rows.append(
                {
                    "row": f"evaluate --via {via}",
                    "drafts": len(drafts),
                    "prompts": prompts,
                    "seconds": seconds,
                    "pooled AL": " / ".join(f"{d['pooled_accept_length']:.3f}" for d in result["drafts"]),
                }
            )
    comparisons = []
    for draft, name in zip(drafts, DRAFTS, strict=True):
        steps = same = 0
        differing = []
        for (run_s, steps_s), (_, steps_t) in zip(
            stored[("step", draft)], stored[("trace", draft)], strict=True
        ):
            for a, b in zip(steps_s, steps_t, strict=False):
                if not a.drafted_ids and not b.drafted_ids:
                    continue
                steps += 1
                same_tree = a.tree is None or b.tree is None or a.tree.accepted_path == b.tree.accepted_path
                if a.drafted_ids == b.drafted_ids and a.accepted_count == b.accepted_count and same_tree:
                    same += 1
                else:
                    ties = [
                        t for t in run_s.measured.near_ties if a.position < t <= a.position + num_steps + 1
                    ]
                    differing.append(
                        f"run {run_s.id} step {a.step_index} (step replay's near-ties there: {ties})"
                    )
                    break  # the two diverge from here on
        comparisons.append({"draft": name, "verify steps": steps, "same steps": same, "differing": differing})
    return rows, comparisons


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--topk", type=int, default=1, help="> 1: a tree (SGLang's --speculative-eagle-topk)")
    parser.add_argument(
        "--draft-tokens", type=int, help="a tree's N (SGLang's --speculative-num-draft-tokens)"
    )
    args = parser.parse_args()
    rows, comparisons = run(args.prompts, args.tokens, args.steps, args.topk, args.draft_tokens)
    shape = "greedy chain" if args.topk == 1 else f"greedy tree topk {args.topk}, N {args.draft_tokens}"
    print(
        f"{args.prompts} prompts x {args.tokens} tokens, K = {args.steps}, {shape}, fp32 CPU, drafts {', '.join(DRAFTS)}"
    )
    print("| row | drafts | prompts | seconds | pooled AL per draft |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['row']} | {r['drafts']} | {r['prompts']} | {r['seconds']:.1f} | {r['pooled AL']} |")
    print(f"ratio step / trace: {rows[0]['seconds'] / rows[1]['seconds']:.2f}x")
    print("| draft | verify steps | same steps | first differing step |")
    print("| --- | --- | --- | --- |")
    for c in comparisons:
        print(
            f"| {c['draft']} | {c['verify steps']} | {c['same steps']} | {'; '.join(c['differing']) or 'none'} |"
        )


if __name__ == "__main__":
    main()
