"""Build the SmolLM2 DFlash draft: a block-diffusion drafter trained here the way SpecForge trains one.

    python -m demo.build_dflash                 # every stage; resumes from demo/smollm2/.build/dflash
    python -m demo.build_dflash --quick --out /tmp/dflash_quick   # a minutes-long smoke run

Stages (each reuses finished output):
1. features: the target's residual-stream states at the draft's target layers (z-lab ids
   TARGET_LAYER_IDS = HF hidden_states[id + 1]) on every record of the chat training set
   (demo/smollm2/data/train.jsonl: the target's own greedy answers), bf16 on disk;
2. draft: the DFlash objective (demo/train_dflash.py: anchors in the loss mask, a block of masks after
   each, context strictly before it, position-decayed cross-entropy; the target's embeddings and head
   frozen), exported in z-lab's format (config.json + model.safetensors, no embeddings or head);
3. variants: `dflash-shifted`, the same weights declaring target_layer_ids one higher (the HF indices
   written where z-lab ids belong: the index-convention trap).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from backend.target.capture import AuxCapture

OUT = Path(__file__).resolve().parent / "smollm2"
SEED = 2026
NUM_TARGET_LAYERS = 30


def target_layer_ids(num_target_layers: int, count: int) -> list[int]:
    """z-lab's `build_target_layer_ids` (dflash/model.py): `count` ids spread over 1..N-3."""
    if count == 1:
        return [num_target_layers // 2]
    return [int(round(1 + i * (num_target_layers - 4) / (count - 1))) for i in range(count)]


TARGET_LAYER_IDS = target_layer_ids(NUM_TARGET_LAYERS, 5)  # [1, 8, 14, 20, 27]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def features(target, records: list[dict], hf_indices: list[int], path: Path) -> list[dict]:
    """Per record: input_ids, loss_mask and the states at `hf_indices` [T, n * H] (bf16), computed once."""
    if path.exists():
        return torch.load(path, weights_only=True)
    computed = []
    with torch.no_grad(), AuxCapture(target, hf_indices) as capture:
        for number, record in enumerate(records):
            target.model(input_ids=torch.tensor([record["input_ids"]]))
            states = torch.cat([capture.captured[i][0] for i in hf_indices], dim=-1)
            computed.append(
                {
                    "input_ids": torch.tensor(record["input_ids"]),
                    "loss_mask": torch.tensor(record["loss_mask"]),
                    "states": states.to(torch.bfloat16),
                }
            )
            if number % 100 == 0:
                log(f"target features {number + 1}/{len(records)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(computed, path.with_suffix(".partial"))
    path.with_suffix(".partial").replace(path)
    return computed


BLOCK_SIZE = 8
MASK_TOKEN_ID = 2  # SpecForge's resolve_mask_token_id: SmolLM2 has no mask token and no spare row, so the pad (<|im_end|>)
DRAFTS = OUT / "drafts"


def config_dict(target_config) -> dict:
    """The draft's config.json, z-lab's format (a Qwen3Config plus block_size, num_target_layers and
    dflash_config), the target's widths and RoPE."""
    return {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "model_type": "qwen3",
        "block_size": BLOCK_SIZE,
        "num_target_layers": target_config.num_hidden_layers,
        "dflash_config": {"mask_token_id": MASK_TOKEN_ID, "target_layer_ids": TARGET_LAYER_IDS},
        "hidden_size": target_config.hidden_size,
        "intermediate_size": target_config.intermediate_size,
        "num_hidden_layers": 1,
        "num_attention_heads": target_config.num_attention_heads,
        "num_key_value_heads": target_config.num_key_value_heads,
        "head_dim": target_config.hidden_size // target_config.num_attention_heads,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "rms_norm_eps": target_config.rms_norm_eps,
        "rope_theta": float(
            getattr(target_config, "rope_theta", None) or target_config.rope_parameters["rope_theta"]
        ),
        "rope_scaling": None,
        "max_position_embeddings": 8192,
        "layer_types": ["full_attention"],
        "use_sliding_window": False,
        "vocab_size": target_config.vocab_size,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }


def heldout_accept_length(target_dir: Path, draft, prompts: list[list[int]], new_tokens: int) -> float:
    """Mean a + 1 over the greedy replays of `prompts` (K = block_size - 1, fp32 CPU)."""
    from backend.engine.batch import accept_lengths
    from backend.engine.dflash_step import dflash_wiring
    from backend.engine.loading import load_target

    target = load_target(target_dir, device="cpu", dtype="fp32")
    counts = accept_lengths(target, draft, prompts, dflash_wiring(draft.config), BLOCK_SIZE - 1, new_tokens)
    flat = [a for per in counts for a in per]
    return 1 + sum(flat) / len(flat)


def export(draft, config: dict, out: Path) -> None:
    from safetensors.torch import save_file

    from demo import packed

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    state = {n: t.detach().to(torch.bfloat16).contiguous() for n, t in draft.state_dict().items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    packed.pack(out)


def shifted_variant(source: Path, out: Path) -> None:
    """The same weights declaring target_layer_ids one higher: HF hidden_states indices written where
    z-lab ids belong (the index-convention trap); the weights are links to the source's."""
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((source / "config.json").read_text())
    config["dflash_config"]["target_layer_ids"] = [i + 1 for i in config["dflash_config"]["target_layer_ids"]]
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name in ("model.safetensors.xz", "model.safetensors.sha256"):
        link = out / name
        link.unlink(missing_ok=True)
        link.symlink_to(Path("..") / source.name / name)
    (out / "TRAINED_LAYERS.json").write_text(
        json.dumps(
            {
                "target_layer_ids": TARGET_LAYER_IDS,
                "note": "lab note: the z-lab ids this draft was trained on (HF hidden_states[id + 1]); its "
                "config.json declares each one higher. SpecLens's diagnosis does not read this file.",
            },
            indent=2,
        )
        + "\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--quick", action="store_true", help="a few records and steps: a smoke run")
    parser.add_argument("--stage", choices=["features", "all"], default="all")
    args = parser.parse_args(argv)
    from transformers import LlamaForCausalLM

    torch.manual_seed(SEED)
    work = args.out / ".build" / "dflash"
    records = [json.loads(line) for line in (OUT / "data" / "train.jsonl").open()]
    if args.quick:
        records = records[:16]
    target = LlamaForCausalLM.from_pretrained(OUT / "target", dtype=torch.float32).eval()
    hf = [i + 1 for i in TARGET_LAYER_IDS]
    started = time.time()
    computed = features(target, records, hf, work / f"features_{len(records)}.pt")
    log(f"features of {len(computed)} records at HF {hf} in {time.time() - started:.0f} s")
    if args.stage == "features":
        return
    from backend.drafts.dflash_config import parse_dflash_config
    from backend.engine.dflash_model import DFlashDraft
    from demo import train_dflash

    config = config_dict(target.config)
    for parameter in target.parameters():
        parameter.requires_grad_(False)
    draft = DFlashDraft(parse_dflash_config(config), target.get_input_embeddings(), target.lm_head.weight)
    with torch.no_grad():
        for parameter in draft.parameters():
            if parameter.ndim == 2:
                parameter.normal_(0.0, 0.02)
        # the head's input at a scale where the initial logits have unit spread (not ~100 nats of loss)
        draft.norm.weight.fill_(1.0 / float(target.lm_head.weight.norm(dim=-1).mean()))
    evaluation = [json.loads(line) for line in (OUT / "data" / "eval.jsonl").open()]
    heldout = [r["input_ids"][: r["n_prompt_tokens"]] for r in evaluation if r["source"] == "docstring"][:6]
    best = {"heldout_accept_length": -1.0}
    out = args.out / "drafts" / "dflash"

    def on_epoch(epoch: int, trained) -> dict:
        with torch.inference_mode():
            measured = heldout_accept_length(OUT / "target", trained, heldout, 16 if args.quick else 64)
        log(f"epoch {epoch}: held-out accept length {measured:.3f}")
        if measured > best["heldout_accept_length"]:
            best.update(heldout_accept_length=measured, epoch=epoch)
            export(trained, config, out)
        return {"heldout_accept_length": measured}

    schedule = train_dflash.Schedule(epochs=1 if args.quick else 2)
    curve = train_dflash.train(draft, computed, schedule, log=log, on_epoch=on_epoch)
    shifted_variant(out, args.out / "drafts" / "dflash-shifted")
    (out / "TRAINING_CURVE.json").write_text(
        json.dumps(
            {
                "definition": f"held-out accept length: mean over {len(heldout)} held-out docstring prompts "
                f"(eval.jsonl) of the greedy replay's mean a + 1, K = {BLOCK_SIZE - 1} (block {BLOCK_SIZE}), 64 "
                "new tokens, fp32 CPU; the exported draft is the best epoch",
                "schedule": schedule.__dict__,
                "training_records": len(computed),
                "target_layer_ids": TARGET_LAYER_IDS,
                "curve": curve,
                "chosen_epoch": best.get("epoch"),
                "build_minutes": round((time.time() - started) / 60, 1),
            },
            indent=1,
        )
        + "\n"
    )
    log(f"DFlash draft built in {(time.time() - started) / 60:.1f} min: {out}")


if __name__ == "__main__":
    main()
