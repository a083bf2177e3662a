"""Build the bundled offline demo: a small Llama target trained on Python source already on the machine
(demo/corpus.py), a dataset sampled from it, and three EAGLE-3 drafts (final, epoch1, and the mis-wired
one of docs/seed-story.md).

    python -m demo.build                 # everything, ~56 min on 2 CPU cores; writes demo/
    python -m demo.build --quick --out /tmp/demo_quick   # a minutes-long smoke run of every stage

Seeded and deterministic on one machine (the corpus is this Python's standard library and the
installed packages, so other versions give other text). Stages reuse finished work in --work, so an interrupted build
resumes. Numbers the build aims at are measured by `python -m demo.measure` into demo/MEASURED.md.

Measured for the committed demo (2026-12-01, this 2-core machine, nothing else running, stages timed
from the log): corpus and tokenizer 0.4 min, likelihood training of the target 26.4 min (1,500 steps,
~3,900 tok/s), unlikelihood fine-tuning 6.9 min (400 updates), 1,536 + 48 sampled responses 2.1 min,
target features 0.7 min, two TTT drafts of 8 epochs 9.6 + 9.7 min: 55.8 min in all (the build ran as
three resumable invocations; each kept stage counted once). Run alone on a quiet machine the draft
stage took 53 s an epoch (7.1 min a draft), so the whole build fits in about 50 min.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from backend.run.wiring import default_hf_indices
from demo import corpus, make_data, repetition, train_draft, train_target
from tests.support.synthetic import draft_config_dict, save_draft

DEMO_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Plan:
    vocab_size: int = 2048
    text_chars: int = 40_000_000
    tokenizer_chars: int = 8_000_000
    target_layers: int = 12
    target_hidden: int = 160
    target_intermediate: int = 448
    target_steps: int = 1500
    target_batch: int = 16
    seq_len: int = 256
    unlikelihood_updates: int = 400
    unlikelihood_lr: float = 1e-3
    train_samples: int = 1536
    eval_samples: int = 48
    max_new_tokens: int = 128
    draft_vocab: int = 1024
    ttt_steps: int = 4
    epochs: int = 8
    draft_lr: float = 3e-3
    pack_tokens: int = 512
    feature_files: int = 4
    sharegpt: int = 6


QUICK = Plan(
    vocab_size=512,
    text_chars=300_000,
    tokenizer_chars=300_000,
    target_layers=6,
    target_hidden=64,
    target_intermediate=128,
    target_steps=30,
    unlikelihood_updates=6,
    train_samples=48,
    eval_samples=8,
    max_new_tokens=32,
    draft_vocab=256,
    epochs=2,
)
SEED = 1234


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def wirings(num_layers: int) -> dict[str, list[int]]:
    """HF indices: what the config declares (the defaults) and what the mis-wired draft was fed:
    [embedding output, output of layer a, output of layer b] where the defaults are outputs of
    layers [a, b, c] — the shift of docs/seed-story.md."""
    declared = default_hf_indices(num_layers)
    return {"declared": declared, "miswired": [0, declared[0], declared[1]]}


def repetition_monitor(tokenizer, files):
    """monitor(model) -> a log line: the repeated-4-gram share of the model's greedy continuations of 8
    held-out prompts, beside their files' own continuations (demo/repetition.py)."""
    watched = make_data.tokenize_prompts(tokenizer, corpus.prompt_snippets(files, 8, SEED + 5), SEED)
    corpus_share = repetition.mean_share([c for _, _, c in watched])

    def monitor(model) -> str:
        outputs = make_data.greedy_outputs(model, [p for _, p, _ in watched], make_data.CONTINUATION_TOKENS)
        return (
            f"repeated 4-gram share of {len(watched)} greedy outputs {repetition.mean_share(outputs):.3f} "
            f"(their files' own continuations: {corpus_share:.3f})"
        )

    return monitor


def build(out: Path, work: Path, plan: Plan) -> None:
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    work.mkdir(parents=True, exist_ok=True)
    train_files, held_files = corpus.split_files(corpus.source_files(), SEED)
    log(f"corpus: {len(train_files)} training files, {len(held_files)} held-out files")

    target_dir = out / "target"
    # A finished target carries its tokenizer: a resumed build reads it from there rather than
    # re-tokenizing a corpus whose installed packages may have changed since.
    tokenizer_dir = target_dir if (target_dir / "model.safetensors").exists() else work / "tokenizer"
    tokens_file = work / "tokens.pt"
    if tokenizer_dir != target_dir and not tokens_file.exists():
        texts = corpus.training_text(train_files, plan.text_chars, SEED)
        sample, used = [], 0
        for text in texts:  # the tokenizer learns from the first tokenizer_chars of the shuffled files
            if used < plan.tokenizer_chars:
                sample.append(text)
                used += len(text)
        tokenizer = corpus.train_tokenizer(sample, plan.vocab_size)
        tokenizer.save_pretrained(tokenizer_dir)
        encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
        stream = [t for ids in encoded for t in ids]
        torch.save(torch.tensor(stream), tokens_file)
        log(
            f"tokenizer: {len(tokenizer)} tokens; training text {sum(map(len, texts)):,} characters, "
            f"{len(stream):,} tokens"
        )
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    eos = tokenizer.convert_tokens_to_ids(corpus.END_OF_TEXT)

    prompt_sets = {
        "train": (held_files[0::2], plan.train_samples, SEED + 1),
        "eval": (held_files[1::2], plan.eval_samples, SEED + 2),
    }
    if not (target_dir / "model.safetensors").exists():
        monitor = repetition_monitor(tokenizer, held_files[1::2])
        stream = torch.load(tokens_file, weights_only=True)
        likelihood_dir = work / "target_likelihood"  # kept so that a resumed build skips the long stage
        if not (likelihood_dir / "model.safetensors").exists():
            config = train_target.target_config(
                len(tokenizer), eos, plan.target_layers, plan.target_hidden, plan.target_intermediate
            )
            schedule = train_target.Schedule(
                plan.target_steps, plan.target_batch, plan.seq_len, SEED, lr=2e-3, monitor_every=400
            )
            model = train_target.train_target(config, stream, schedule, train_target.Watch(log, monitor))
            model.to(torch.bfloat16).save_pretrained(likelihood_dir)
        model = LlamaForCausalLM.from_pretrained(likelihood_dir, local_files_only=True, dtype=torch.float32)
        log(f"target after likelihood training: {monitor(model.eval())}")
        schedule = train_target.Schedule(
            plan.unlikelihood_updates, 8, plan.seq_len, SEED + 6, lr=plan.unlikelihood_lr, monitor_every=50
        )
        model = train_target.unlikelihood_finetune(model, stream, schedule, train_target.Watch(log, monitor))
        log(f"target: {monitor(model)}")
        model.to(torch.bfloat16).save_pretrained(target_dir)
        tokenizer.save_pretrained(target_dir)
    # Everything below uses the target exactly as the tool loads it: bf16 weights, run in fp32.
    target = LlamaForCausalLM.from_pretrained(target_dir, local_files_only=True, dtype=torch.float32).eval()
    num_layers = target.config.num_hidden_layers
    wiring = wirings(num_layers)

    data_dir = out / "data"
    if not (data_dir / "eval.jsonl").exists():
        for name, (files, count, seed) in prompt_sets.items():
            prompts = make_data.tokenize_prompts(tokenizer, corpus.prompt_snippets(files, count, seed), seed)
            records = make_data.sample_responses(target, prompts, plan.max_new_tokens, seed, eos, log=log)
            make_data.write_jsonl(data_dir / f"{name}.jsonl", records)
            log(f"{name}.jsonl: {len(records)} samples")
            if name == "eval":  # the corpus side of the repetition measure (demo.measure)
                make_data.write_jsonl(
                    data_dir / "eval_continuations.jsonl",
                    [{"index": i, "source": f, "ids": c} for i, (f, _, c) in enumerate(prompts)],
                )
        evaluation = make_data.read_jsonl(data_dir / "eval.jsonl")
        conversations = make_data.sharegpt_conversations(tokenizer, evaluation[: plan.sharegpt])
        (data_dir / "sharegpt.json").write_text(json.dumps(conversations, indent=1))
    records = make_data.read_jsonl(data_dir / "train.jsonl")

    columns = sorted(set(wiring["declared"]) | set(wiring["miswired"]))
    features_file = work / "features.pt"
    if not features_file.exists():
        torch.save(make_data.target_features(target, records, columns, log=log), features_file)
    features = torch.load(features_file, weights_only=True)
    declared_columns = [columns.index(i) for i in wiring["declared"]]
    miswired_columns = [columns.index(i) for i in wiring["miswired"]]
    make_data.write_feature_files(data_dir / "features", features[: plan.feature_files], miswired_columns)

    used = train_draft.draft_vocabulary(records, plan.draft_vocab)
    nested_ids = [i - 1 for i in wiring["declared"]]  # SpecForge writes output-of-layer ids (convention A)
    config_dict = draft_config_dict(
        target.config,
        plan.draft_vocab,
        "specforge",
        aux_ids=nested_ids,
        rms_norm_eps=target.config.rms_norm_eps,
    )

    def export(name: str, draft) -> None:
        path = save_draft(
            out / "drafts" / name,
            config_dict,
            train_draft.draft_tensors(draft, used, target.config.vocab_size),
            layout="specforge",
            dtype=torch.bfloat16,
        )
        log(f"wrote {path}")

    drafts_dir = out / "drafts"
    if not (drafts_dir / "final" / "model.safetensors").exists():
        draft = train_draft.new_draft(config_dict, target, used, SEED + 3)
        train_draft.train_draft(
            draft,
            target,
            used,
            features,
            declared_columns,
            train_draft.DraftSchedule(plan.epochs, plan.ttt_steps, SEED + 3, plan.pack_tokens, plan.draft_lr),
            on_epoch=lambda e, d: export("epoch1", d) if e == 1 else None,
            log=log,
        )
        export("final", draft)
    if not (drafts_dir / "miswired" / "model.safetensors").exists():
        draft = train_draft.new_draft(config_dict, target, used, SEED + 4)
        train_draft.train_draft(
            draft,
            target,
            used,
            features,
            miswired_columns,
            train_draft.DraftSchedule(plan.epochs, plan.ttt_steps, SEED + 4, plan.pack_tokens, plan.draft_lr),
            log=log,
        )
        export("miswired", draft)
        (drafts_dir / "miswired" / "TRAINED_WIRING.json").write_text(
            json.dumps(
                {
                    "aux_hf_indices": wiring["miswired"],
                    "note": "lab note: the features this draft was trained on (HF indices: 0 = embedding output). "
                    "Its config.json declares the default ids. SpecLens's diagnosis does not read this file.",
                },
                indent=2,
            )
            + "\n"
        )
    log("demo built")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=DEMO_DIR, help="where target/, data/, drafts/ go")
    parser.add_argument("--work", type=Path, default=None, help="intermediate files (default: OUT/.build)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of every stage")
    parser.add_argument("--clean", action="store_true", help="remove earlier outputs first")
    args = parser.parse_args(argv)
    work = args.work or args.out / ".build"
    if args.clean:
        for name in ("target", "data", "drafts"):
            shutil.rmtree(args.out / name, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    build(args.out, work, QUICK if args.quick else Plan())


if __name__ == "__main__":
    main()
