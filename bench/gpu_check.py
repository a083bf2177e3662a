"""Device check: bf16 replay on a larger random-init Llama, exactness within tolerance, and timing.

Meant for a session that has a GPU for a few minutes: one command, a table on stdout, JSON in --out.

  PYTHONPATH=. python bench/gpu_check.py --device cuda --dtype bf16 --out $OUT/gpu_check.json

What it checks, on two targets built in a temporary directory:
  random  a random Llama (context matters) with a random draft: the replay's output must equal
          `generate`'s in the same dtype; in bf16 a near-tie may flip (docs/reference.md §7),
          so at the first divergence both tokens are scored by the target in fp32 on the shared
          prefix and the flip is accepted only if their log-probs differ by less than --tolerance.
  bigram  a context-free target whose greedy text cycles through its vocabulary, with a draft that
          knows 80% of the next-token map (accept length ~2.3): replay+record vs generate tokens/s.
Runs on CPU too (slowly) with --device cpu, which is how it is tested without a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from backend.engine.loading import load_target
from backend.engine.preflight import load_checked_draft
from backend.engine.replay import ReplayConfig, output_ids_of, replay
from backend.engine.synthetic import (
    bigram_draft_tensors,
    corrupt_next_token_map,
    cyclic_next_token_map,
    draft_config_dict,
    make_bigram_target,
    make_target,
    random_draft_tensors,
    save_draft,
)
from backend.service.database import open_database
from backend.service.jobs import run_replay_job
from backend.service.requests import ReplayRequest


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--steps", type=int, default=4, help="K")
    parser.add_argument("--tolerance", type=float, default=0.05, help="fp32 log-prob gap allowed for a flip")
    parser.add_argument("--out", type=Path, default=Path("bench/results/gpu_check.json"))
    return parser.parse_args(argv)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(function, device):
    sync(device)
    started = time.perf_counter()
    value = function()
    sync(device)
    return value, time.perf_counter() - started


def generate(target, prompt, new_tokens):
    with torch.inference_mode():
        ids = torch.tensor([prompt], device=target.device)
        return target.model.generate(ids, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)[
            0, len(prompt) :
        ].tolist()


def near_tie(target_dir: Path, prefix: list[int], ours: int, theirs: int, device: str) -> float:
    """fp32 log-prob gap between two candidate next tokens after `prefix`."""
    reference = load_target(target_dir, device=device, dtype="fp32")
    with torch.inference_mode():
        logits = reference.model(input_ids=torch.tensor([prefix], device=reference.device)).logits[0, -1]
    logprobs = torch.log_softmax(logits.float(), -1)
    return abs(float(logprobs[ours] - logprobs[theirs]))


def exactness(root: Path, args) -> dict:
    model = make_target(
        root / "random",
        num_layers=args.layers,
        hidden=args.hidden,
        vocab=args.vocab,
        heads=max(1, args.hidden // 128),
        kv_heads=max(1, args.hidden // 512),
        intermediate=int(args.hidden * 2.75),
        eos_token_id=None,
    )
    config = draft_config_dict(model.config, draft_vocab=args.vocab // 2)
    save_draft(root / "random-draft", config, random_draft_tensors(config))
    del model
    target = load_target(root / "random", device=args.device, dtype=args.dtype)
    draft, report = load_checked_draft(root / "random-draft", target)
    prompt = list(range(1, 17))
    ours = output_ids_of(
        list(replay(target, draft, prompt, report.wiring, ReplayConfig(args.steps, args.new_tokens)))
    )
    theirs = generate(target, prompt, args.new_tokens)
    result = {"tokens": len(ours), "identical": ours == theirs}
    if ours != theirs:
        first = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b)
        gap = near_tie(root / "random", prompt + ours[:first], ours[first], theirs[first], args.device)
        result.update({"first_divergence": first, "fp32_logprob_gap": gap, "near_tie": gap < args.tolerance})
    return result


def timing(root: Path, args) -> dict:
    vocab = min(args.vocab, args.hidden)
    follow = cyclic_next_token_map(vocab)
    model = make_bigram_target(
        root / "bigram",
        follow,
        num_layers=args.layers,
        hidden=args.hidden,
        heads=max(1, args.hidden // 128),
        kv_heads=max(1, args.hidden // 512),
        intermediate=int(args.hidden * 2.75),
    )
    config = draft_config_dict(model.config, aux_ids=[-1, 1, 2])
    save_draft(
        root / "bigram-draft",
        config,
        bigram_draft_tensors(model, config, corrupt_next_token_map(follow, 0.2)),
    )
    del model
    target = load_target(root / "bigram", device=args.device, dtype=args.dtype)
    draft, report = load_checked_draft(root / "bigram-draft", target)
    prompt = list(range(16))
    generate(target, prompt, 16)  # warm up kernels
    url = f"sqlite:///{root / 'gpu.db'}"
    database = open_database(url)
    request = ReplayRequest(
        str(root / "bigram"),
        str(root / "bigram-draft"),
        prompt_ids=tuple(prompt),
        num_steps=args.steps,
        max_new_tokens=args.new_tokens,
        sample_ref="gpu check",
    )
    expected, generate_s = timed(lambda: generate(target, prompt, args.new_tokens), target.device)
    outcome, replay_s = timed(
        lambda: run_replay_job(database, target, draft, request, report.wiring, prompt), target.device
    )
    return {
        "generate_tokens_per_s": len(expected) / generate_s,
        "replay_record_tokens_per_s": len(outcome.output_ids) / replay_s,
        "ratio": (len(outcome.output_ids) / replay_s) / (len(expected) / generate_s),
        "accept_length": outcome.metrics["mean_accept_length"],
        "identical": outcome.output_ids == expected,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    info = {
        "device": args.device,
        "dtype": args.dtype,
        "layers": args.layers,
        "hidden": args.hidden,
        "vocab": args.vocab,
        "new_tokens": args.new_tokens,
        "K": args.steps,
        "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
    }
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        root = Path(tmp)
        result = {"setup": info, "exactness": exactness(root, args), "timing": timing(root, args)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    check, speed = result["exactness"], result["timing"]
    print(f"{info['device']} {info['dtype']}: target {args.layers} layers x {args.hidden}, K={args.steps}")
    print(
        f"  exactness (random pair): {check['tokens']} tokens, identical={check['identical']}"
        + (
            ""
            if check["identical"]
            else f", first divergence at {check['first_divergence']}, fp32 log-prob gap "
            f"{check['fp32_logprob_gap']:.4f} -> {'near-tie (allowed)' if check['near_tie'] else 'NOT a near-tie'}"
        )
    )
    print(
        f"  timing (bigram pair, accept length {speed['accept_length']:.2f} incl. bonus): generate "
        f"{speed['generate_tokens_per_s']:.1f} tok/s, replay+record {speed['replay_record_tokens_per_s']:.1f} tok/s, "
        f"ratio {speed['ratio']:.2f}, identical={speed['identical']}"
    )
    print(f"JSON: {args.out}")
    ok = (check["identical"] or check["near_tie"]) and speed["identical"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
