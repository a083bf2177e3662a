"""A 32-layer target config and drafts for it, and command lines, for the serving-flag lint tests."""

from __future__ import annotations

from pathlib import Path

LAYERS = 32
CHAIN = "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"  # consistent


def llama_config(**kwargs):
    from transformers import LlamaConfig

    return LlamaConfig(**kwargs)


def make_lint_target(path: Path) -> Path:
    """A target directory with only config.json (the lint reads its architecture, depth, context)."""
    llama_config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(path)
    return path


def make_draft(
    root: Path, name: str, layout="specforge", aux_ids=None, drop=(), draft_vocab=128, **overrides
) -> Path:
    from tests.support.synthetic import draft_config_dict, random_draft_tensors, save_draft

    target = llama_config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    config = draft_config_dict(target, draft_vocab=draft_vocab, layout=layout, aux_ids=aux_ids, **overrides)
    tensors = {k: v for k, v in random_draft_tensors(config).items() if k not in drop}
    return save_draft(root / name, config, tensors, layout)


def sglang(draft, *flags, target="meta-llama/Llama-3.1-8B-Instruct") -> str:
    return (
        "python -m sglang.launch_server --model-path " + str(target) + " --speculative-algorithm EAGLE3 "
        f"--speculative-draft-model-path {draft} " + " ".join(flags) + " --tp 1 --mem-fraction-static 0.8"
    )
