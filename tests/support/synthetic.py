"""Random-init targets and EAGLE-3 drafts written to disk in every published layout.

Tests and benchmarks use these instead of downloaded checkpoints (there is no network at run time):
a Llama target saved as a standard Hugging Face directory, and drafts saved exactly as SpecForge
(model.safetensors, `midlayer.*`, nested `eagle_config`), the original EAGLE releases
(pytorch_model.bin, `LlamaForCausalLM`) or vLLM speculators (`Eagle3Speculator`, `layers.0.*`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders
from tokenizers.models import BPE
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from backend.drafts.draft_config import parse_draft_config
from backend.drafts.layouts import LAYOUTS, to_layout_names
from backend.engine.draft_model import Eagle3Draft
from backend.target.capture import AuxCapture


@dataclass(frozen=True)
class TargetShape:
    """A random Llama target's architecture (what its config.json says)."""

    num_layers: int = 4
    hidden: int = 64
    vocab: int = 128
    eos_token_id: int | None = None  # a token of the vocab; None: generation never stops early
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 128
    rope_theta: float = 500000.0

    def llama_config(self) -> LlamaConfig:
        return LlamaConfig(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            max_position_embeddings=4096,
            rope_theta=self.rope_theta,
            eos_token_id=self.eos_token_id,
            bos_token_id=None,
            pad_token_id=None,
            tie_word_embeddings=False,
        )


SMALL_TARGET = TargetShape()


def make_target(
    path: Path,
    shape: TargetShape = SMALL_TARGET,
    seed: int = 0,
    attention_scale: float = 1.0,
    init_std: float = 0.25,
) -> LlamaForCausalLM:
    """Save a random Llama target of `shape` to `path`. `attention_scale` < 1 shrinks every o_proj,
    making the target closer to a bigram model (so a hand-built draft can predict it). `init_std`
    0.25 gives sharp, far-from-tied logits (what the exactness tests want); 0.02 is the scale of
    trained models, whose near-ties make bf16 rounding visible (docs/reference.md §7)."""
    torch.manual_seed(seed)
    config = shape.llama_config()
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear | torch.nn.Embedding):
                module.weight.normal_(0.0, init_std)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(attention_scale)
    model.generation_config = GenerationConfig(eos_token_id=shape.eos_token_id, do_sample=False)
    model.save_pretrained(path)
    character_tokenizer(shape.vocab).save_pretrained(path)
    return model


def character_tokenizer(vocab: int) -> PreTrainedTokenizerFast:
    """A character-level tokenizer over the first `vocab` printable characters (id 0 = unknown)."""
    alphabet = [chr(c) for c in range(32, 127)] + [chr(c) for c in range(161, 161 + max(0, vocab - 96))]
    pieces = {"<unk>": 0, **{ch: i + 1 for i, ch in enumerate(alphabet[: vocab - 1])}}
    tokenizer = Tokenizer(BPE(vocab=pieces, merges=[], unk_token="<unk>"))
    tokenizer.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>")


def draft_config_dict(
    target_config: LlamaConfig,
    draft_vocab: int | None = None,
    layout: str = "specforge",
    aux_ids: list[int] | None = None,
    **overrides,
) -> dict:
    """A draft config.json for `target_config` in the given layout. `aux_ids` are written in the
    layout's own convention (nested output-of-layer ids for SpecForge, HF indices for speculators)."""
    decoder = {
        "hidden_size": target_config.hidden_size,
        "intermediate_size": 2 * target_config.hidden_size,
        "num_attention_heads": target_config.num_attention_heads,
        "num_key_value_heads": target_config.num_key_value_heads,
        "num_hidden_layers": 1,
        "vocab_size": target_config.vocab_size,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 2048,
        "hidden_act": "silu",
        "model_type": "llama",
    }
    vocab = {"draft_vocab_size": draft_vocab} if draft_vocab else {}
    if layout == "speculators":
        config = {
            "architectures": ["Eagle3Speculator"],
            "speculators_model_type": "eagle3",
            "transformer_layer_config": decoder,
            "target_hidden_size": target_config.hidden_size,
            **vocab,
        }
        if aux_ids is not None:
            config["eagle_aux_hidden_state_layer_ids"] = aux_ids
    elif layout == "eagle":
        config = {"architectures": ["LlamaForCausalLM"], **decoder, **vocab}
    elif layout == "specforge":
        config = {"architectures": ["LlamaForCausalLMEagle3"], **decoder, **vocab}
        if aux_ids is not None:
            config["eagle_config"] = {
                "eagle_aux_hidden_state_layer_ids": aux_ids,
                "use_aux_hidden_state": True,
            }
    else:
        raise ValueError(f"unknown layout {layout!r}; use one of {LAYOUTS}")
    config.update(overrides)
    return config


def vocab_mapping(used_target_ids: list[int], target_vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """d2t offsets and t2d flags for a draft vocabulary of `used_target_ids` (EAGLE/SpecForge layout)."""
    used = torch.tensor(sorted(set(used_target_ids)), dtype=torch.long)
    d2t = used - torch.arange(len(used))
    t2d = torch.zeros(target_vocab, dtype=torch.bool)
    t2d[used] = True
    return d2t, t2d


def random_draft_tensors(config: dict, seed: int = 1, used_target_ids: list[int] | None = None) -> dict:
    """Random draft weights named as in our module (`layers.0.*`), plus d2t/t2d when Vd < V."""
    torch.manual_seed(seed)
    parsed = parse_draft_config(config)
    draft = Eagle3Draft(parsed, target_embedding=None)
    with torch.no_grad():
        for param in draft.parameters():
            if param.ndim == 2:
                param.normal_(0.0, 0.5 / param.shape[1] ** 0.5)
    tensors = {n: t.clone() for n, t in draft.state_dict().items() if n != "d2t"}
    if parsed.draft_vocab_size < parsed.vocab_size:
        if used_target_ids is None:
            generator = torch.Generator().manual_seed(seed)
            used_target_ids = torch.randperm(parsed.vocab_size, generator=generator)[
                : parsed.draft_vocab_size
            ].tolist()
        tensors["d2t"], tensors["t2d"] = vocab_mapping(used_target_ids, parsed.vocab_size)
    return tensors


def save_draft(
    path: Path, config: dict, tensors: dict, layout: str = "specforge", dtype: torch.dtype | None = None
) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    named = to_layout_names(tensors, layout)
    if dtype is not None:
        named = {n: t.to(dtype) if t.is_floating_point() else t for n, t in named.items()}
    if layout == "eagle":
        torch.save(named, path / "pytorch_model.bin")
    else:
        save_file({n: t.contiguous() for n, t in named.items()}, str(path / "model.safetensors"))
    return path


@torch.no_grad()
def copy_draft_tensors(target: LlamaForCausalLM, config: dict) -> dict:
    """A draft that predicts the target well when the target is close to a bigram model.

    Its fc passes the third aux chunk (wire it to HF index L, the last layer's pre-norm output)
    straight through, attention and MLP add nothing, and its lm_head is solved so that
    lm_head(norm(r(x))) puts its maximum on f(f(x)), where f(x) is the target's greedy next token
    after x alone. Given (A_p, x_{p+1}) it thus proposes the token after x_{p+1}: usually right for
    d_1, rarely for d_2.. (the chain feeds back the same hidden).
    """
    tensors = random_draft_tensors(config, seed=5)
    hidden = target.config.hidden_size
    vocab = target.config.vocab_size
    if vocab > hidden:
        raise ValueError("the copy draft needs vocab <= hidden so that its lm_head can be solved exactly")
    tokens = torch.arange(vocab)
    residual, logits = _tokens_alone(target, tokens)  # r(x): pre-norm last-layer output for x alone
    following = logits.argmax(-1)  # f(x)
    wanted = following[following]  # f(f(x))
    normed = target.model.norm(residual)
    onehot = torch.nn.functional.one_hot(wanted, vocab).float() * 20.0
    lm_head = torch.linalg.lstsq(normed, onehot).solution.T  # [V, H]
    fc = torch.zeros(hidden, 3 * hidden)
    fc[:, 2 * hidden :] = torch.eye(hidden)
    tensors["fc.weight"] = fc
    tensors["layers.0.self_attn.o_proj.weight"].zero_()
    tensors["layers.0.mlp.down_proj.weight"].zero_()
    tensors["norm.weight"] = target.model.norm.weight.detach().clone()
    tensors["lm_head.weight"] = lm_head.contiguous()
    tensors.pop("d2t", None)
    tensors.pop("t2d", None)
    return tensors


def cyclic_next_token_map(vocab: int, seed: int = 0) -> list[int]:
    """A permutation of the vocabulary that is one single cycle: greedy text visits every token."""
    order = torch.randperm(vocab, generator=torch.Generator().manual_seed(seed)).tolist()
    following = [0] * vocab
    for here, there in zip(order, order[1:] + order[:1], strict=True):
        following[here] = there
    return following


BIGRAM_SHAPE = TargetShape(num_layers=8, hidden=256, heads=8, kv_heads=4, intermediate=688)


@torch.no_grad()
def make_bigram_target(
    path: Path, next_token: list[int], shape: TargetShape = BIGRAM_SHAPE, seed: int = 0
) -> LlamaForCausalLM:
    """A target of `shape` (its vocab: len(next_token)) whose greedy next token after x is
    next_token[x] whatever the context.

    Attention outputs are zeroed (the attention is still computed, so it costs what a real layer
    costs) and lm_head is solved so that argmax picks next_token[x]. Needs vocab <= hidden.
    """
    vocab = len(next_token)
    if vocab > shape.hidden:
        raise ValueError("a bigram target needs vocab <= hidden")
    shape = replace(shape, vocab=vocab)
    model = make_target(path, shape, seed=seed, attention_scale=0.0)
    residual, _ = _tokens_alone(model, torch.arange(vocab))
    targets = torch.nn.functional.one_hot(torch.tensor(next_token), vocab).float() * 20.0
    model.lm_head.weight.copy_(torch.linalg.lstsq(model.model.norm(residual), targets).solution.T)
    model.save_pretrained(path)
    return model


def _tokens_alone(model: LlamaForCausalLM, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each token alone: the last layer's pre-norm output (HF index L) and the next-token logits."""
    with AuxCapture(model, [model.config.num_hidden_layers] * 3) as capture:
        logits = model(input_ids=tokens[:, None]).logits[:, -1]
        return capture.captured[model.config.num_hidden_layers][:, -1], logits


@torch.no_grad()
def bigram_draft_tensors(target: LlamaForCausalLM, config: dict, believed_next: list[int]) -> dict:
    """A draft that knows a next-token map (`believed_next`) and follows it for every chain step.

    Its hidden state is a one-hot vector of the current token: fc maps the embedding chunk (wire
    aux chunk 0 to HF index 0) to one-hot(next[x_t]) = one-hot(x_{t+1}); the MLP turns one-hot(x)
    into one-hot(next[x]); lm_head reads the one-hot back. Where `believed_next` agrees with the
    target's map the proposal is right, so the share of agreeing tokens sets the acceptance rate.
    Needs vocab <= draft hidden and vocab <= intermediate size.
    """
    tensors = random_draft_tensors(config, seed=7)
    vocab = len(believed_next)
    hidden = tensors["fc.weight"].shape[0]
    intermediate = tensors["layers.0.mlp.up_proj.weight"].shape[0]
    if vocab > hidden or vocab > intermediate:
        raise ValueError("the bigram draft needs vocab <= hidden and vocab <= intermediate size")
    believed = torch.tensor(believed_next)
    one_hot = torch.eye(hidden)[:vocab]  # row x = one-hot(x)
    embedding = target.get_input_embeddings().weight  # [V, Ht]
    fc = torch.zeros_like(tensors["fc.weight"])
    fc[:, : embedding.shape[1]] = torch.linalg.lstsq(embedding, one_hot[believed]).solution.T
    scale = hidden**0.5  # RMSNorm of a one-hot vector multiplies it by sqrt(hidden)
    gate = torch.zeros_like(tensors["layers.0.mlp.gate_proj.weight"])
    gate[:vocab, :vocab] = torch.eye(vocab)
    activation = torch.nn.functional.silu(torch.tensor(scale)) * scale  # what unit x carries for one-hot(x)
    down = torch.zeros_like(tensors["layers.0.mlp.down_proj.weight"])
    down[:vocab, :vocab] = (one_hot[believed][:, :vocab].T - torch.eye(vocab)) / activation
    tensors.update(
        {
            "fc.weight": fc,
            "layers.0.self_attn.o_proj.weight": torch.zeros_like(tensors["layers.0.self_attn.o_proj.weight"]),
            "layers.0.mlp.gate_proj.weight": gate,
            "layers.0.mlp.up_proj.weight": gate.clone(),
            "layers.0.mlp.down_proj.weight": down,
            "layers.0.post_attention_layernorm.weight": torch.ones(hidden),
            "norm.weight": torch.ones(hidden),
            "lm_head.weight": torch.eye(hidden)[:vocab].clone() * 4.0,
        }
    )
    tensors.pop("d2t", None)
    tensors.pop("t2d", None)
    return tensors


def corrupt_next_token_map(next_token: list[int], wrong_share: float, seed: int = 1) -> list[int]:
    """The same map with `wrong_share` of its entries pointing at another token. Use a seed other
    than cyclic_next_token_map's: the same seed picks a contiguous stretch of the cycle."""
    generator = torch.Generator().manual_seed(seed)
    vocab = len(next_token)
    believed = list(next_token)
    for token in torch.randperm(vocab, generator=generator)[: round(wrong_share * vocab)].tolist():
        believed[token] = (
            next_token[token] + 1 + int(torch.randint(vocab - 1, (1,), generator=generator))
        ) % vocab
    return believed


# ----------------------------------------------------------------------------- DFlash drafts


def dflash_config_dict(
    target_config,
    num_layers: int = 2,
    block_size: int = 4,
    target_layer_ids: list[int] | None = None,
    mask_token_id: int = 5,
    **overrides,
) -> dict:
    """A DFlash draft's config.json in z-lab's format (dflash/model.py) for a Llama `target_config`."""
    heads = target_config.num_attention_heads
    config = {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "model_type": "qwen3",
        "block_size": block_size,
        "num_target_layers": target_config.num_hidden_layers,
        "dflash_config": {
            "mask_token_id": mask_token_id,
            "target_layer_ids": target_layer_ids
            if target_layer_ids is not None
            else list(range(min(3, target_config.num_hidden_layers - 1))),
        },
        "hidden_size": target_config.hidden_size,
        "intermediate_size": 2 * target_config.hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": target_config.num_key_value_heads,
        "head_dim": target_config.hidden_size // heads,
        "hidden_act": "silu",
        "attention_bias": False,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": 4096,
        "vocab_size": target_config.vocab_size,
        "tie_word_embeddings": False,
    }
    return config | overrides


def random_dflash_tensors(config: dict, seed: int = 1, std: float = 0.5) -> dict:
    """Random DFlash weights under z-lab's names (fc, hidden_norm, layers.N.*, norm)."""
    from backend.drafts.dflash_config import parse_dflash_config
    from backend.engine.dflash_model import DFlashDraft

    torch.manual_seed(seed)
    draft = DFlashDraft(
        parse_dflash_config(config), torch.nn.Embedding(1, config["hidden_size"]), torch.zeros(1)
    )
    with torch.no_grad():
        for param in draft.parameters():
            if param.ndim == 2:
                param.normal_(0.0, std / param.shape[1] ** 0.5)
    return {n: t.clone() for n, t in draft.state_dict().items()}


def save_dflash(path: Path, config: dict, tensors: dict) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    save_file({n: t.contiguous() for n, t in tensors.items()}, str(path / "model.safetensors"))
    return path
