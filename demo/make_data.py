"""The demo datasets: held-out prompts, responses sampled from the target itself (the "synthetic data
from the served model" pattern of docs/seed-story.md), and SpecForge-style offline feature files."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from backend.target.capture import AuxCapture

SAMPLING_TEMPERATURE = 0.4  # responses near what the target writes greedily, as a served draft sees
PROMPT_LENGTHS = (48, 64, 80, 96)


CONTINUATION_TOKENS = 96


def tokenize_prompts(
    tokenizer, snippets: list[tuple[str, str]], seed: int
) -> list[tuple[str, list[int], list[int]]]:
    """(family, prompt ids, the file's own next CONTINUATION_TOKENS ids) per snippet long enough."""
    generator = torch.Generator().manual_seed(seed)
    prompts = []
    for family, text in snippets:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        length = PROMPT_LENGTHS[int(torch.randint(len(PROMPT_LENGTHS), (1,), generator=generator))]
        if len(ids) >= length + CONTINUATION_TOKENS:
            prompts.append((family, ids[:length], ids[length : length + CONTINUATION_TOKENS]))
    return prompts


@torch.no_grad()
def sample_responses(
    model,
    prompts: list[tuple[str, list[int], list[int]]],
    max_new_tokens: int,
    seed: int,
    eos: int,
    batch: int = 32,
    log=print,
) -> list[dict]:
    """Records in the training JSONL format (docs/seed-story.md); loss_mask is 1 on the response (incl. a final EOS)."""
    records: list[dict | None] = [None] * len(prompts)
    by_length: dict[int, list[int]] = {}
    for index, (_, ids, _) in enumerate(prompts):
        by_length.setdefault(len(ids), []).append(index)
    done = 0
    for length in sorted(by_length):
        indices = by_length[length]
        for start in range(0, len(indices), batch):
            chunk = indices[start : start + batch]
            torch.manual_seed(seed + chunk[0])
            input_ids = torch.tensor([prompts[i][1] for i in chunk])
            out = model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                do_sample=True,
                temperature=SAMPLING_TEMPERATURE,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_new_tokens,
                eos_token_id=eos,
                pad_token_id=eos,
            )
            for row, index in zip(out[:, length:].tolist(), chunk, strict=True):
                response = row[: row.index(eos) + 1] if eos in row else row
                family, prompt, _ = prompts[index]
                ids = prompt + response
                records[index] = {
                    "input_ids": ids,
                    "loss_mask": [0] * len(prompt) + [1] * len(response),
                    "seq_len": len(ids),
                    "n_prompt_tokens": len(prompt),
                    "n_response_tokens": len(response),
                    "source": family,
                }
            done += len(chunk)
            log(f"sampled {done}/{len(prompts)} responses")
    return [r for r in records if r is not None]


@torch.no_grad()
def greedy_outputs(model, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """The model's plain greedy continuation of each prompt (transformers `generate`, no sampling)."""
    outputs = []
    for ids in prompts:
        prompt = torch.tensor([ids])
        out = model.generate(
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=model.config.eos_token_id,
        )
        outputs.append(out[0, len(ids) :].tolist())
    return outputs


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for record in records:
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@torch.no_grad()
def target_features(model, records: list[dict], aux_hf_indices: list[int], log=print) -> list[dict]:
    """Per record: the residual-stream states at `aux_hf_indices` [T, n, Ht] and the target's final
    (post-norm) hidden [T, Ht], from which the target's logits are recomputed during training."""
    last = model.config.num_hidden_layers
    features = []
    with AuxCapture(model, [*aux_hf_indices, last]) as capture:
        for number, record in enumerate(records):
            model(input_ids=torch.tensor([record["input_ids"]]))
            states = torch.stack([capture.captured[i][0] for i in aux_hf_indices], dim=1)
            final = model.model.norm(capture.captured[last][0])
            features.append(
                {
                    "input_ids": torch.tensor(record["input_ids"]),
                    "loss_mask": torch.tensor(record["loss_mask"]),
                    "aux": states.clone(),
                    "final": final.clone(),
                }
            )
            if number % 200 == 0:
                log(f"target features {number + 1}/{len(records)}")
    return features


def write_feature_files(directory: Path, features: list[dict], aux_columns: list[int]) -> None:
    """SpecForge offline feature files (`torch.save` dict per sample; bf16 as a GPU target gives)."""
    directory.mkdir(parents=True, exist_ok=True)
    for number, sample in enumerate(features):
        aux = sample["aux"][:, aux_columns].reshape(len(sample["input_ids"]), -1)
        torch.save(
            {
                "input_ids": sample["input_ids"].clone(),
                "loss_mask": sample["loss_mask"].clone(),
                "hidden_state": sample["final"][None].to(torch.bfloat16).clone(),
                "aux_hidden_state": aux[None].to(torch.bfloat16).clone(),
            },
            directory / f"data_{number}.ckpt",
        )


def sharegpt_conversations(tokenizer, records: list[dict]) -> list[dict]:
    """A few ShareGPT conversations: the prompt code as the user's message, the target's continuation
    as the assistant's."""
    conversations = []
    for number, record in enumerate(records):
        prompt = tokenizer.decode(record["input_ids"][: record["n_prompt_tokens"]])
        response = tokenizer.decode(
            record["input_ids"][record["n_prompt_tokens"] :], skip_special_tokens=True
        )
        conversations.append(
            {
                "id": f"demo-{number}",
                "conversations": [
                    {"from": "human", "value": f"Continue this {record['source']} code:\n{prompt}"},
                    {"from": "gpt", "value": response},
                ],
            }
        )
    return conversations
