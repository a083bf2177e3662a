"""Drafts built from published config.json files (field names, architectures, variant flags, tensor
names, formats kept; sizes shrunk; random weights), each read by every engine:

- it loads, or that engine refuses it with the real reason;
- the aux HF indices are that engine's rule (written out per style below, from the engines' source);
- the replay still equals plain greedy decoding;
- the first verify step's drafts d_1, d_2 equal an independent, plain computation of that engine's
  math (`reference_drafts`, written here with raw tensors, not with the engine code under test).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

PUBLISHED = json.loads(
    (Path(__file__).resolve().parent.parent / "support" / "published_configs.json").read_text()
)
SMALL = dict(
    hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=256
)
ENGINES = ("sglang", "vllm", "specforge", "speculators", "eagle")

# style: (published file, target layers, file layout, expected aux HF indices per engine, math switches
# per engine that differ from the plain EAGLE-3 layer, engines that refuse it)
DEFAULT8 = [2, 4, 5]
STYLES = {
    "specforge-llama3-8b": (
        "specforge-llama3-8B-eagle3",
        8,
        "specforge",
        dict.fromkeys(ENGINES, DEFAULT8),
        {},
        {},
    ),
    "specforge-qwen3-8b": (
        "specforge-qwen3-8b-eagle3",
        8,
        "specforge",
        dict.fromkeys(ENGINES, DEFAULT8),
        {},
        {},
    ),
    "specforge-qwen3-30b-a3b-eagle3.1": (  # fc_norm + norm_output: EAGLE 3.1 by SpecForge's meaning
        "specforge-qwen3-30B-A3B-eagle3.1",
        8,
        "specforge",
        dict.fromkeys(ENGINES, DEFAULT8),
        {
            "sglang": {"fc_norm", "post_norm_feedback"},  # SGLang after PR #24663 (readings.py)
            "vllm": {"fc_norm", "post_norm_feedback"},
            "vllm-v2": {"fc_norm", "post_norm_feedback"},
            "specforge": {"fc_norm"},
            "speculators": {"fc_norm", "post_norm_feedback"},
        },
        {},
    ),
    "specforge-gpt-oss-20b": (  # nested [1, 11, 21]; explicit head_dim != hidden / heads
        "specforge-gpt-oss-20B-eagle3",
        24,
        "specforge",
        {
            "sglang": [2, 12, 22],
            "vllm": [1, 11, 21],  # vLLM 0.32's V1 runner reads the nested ids as HF indices (no + 1)
            "vllm-v2": [2, 12, 21],  # its V2 runner ignores them: the default (2, L//2, L-3)
            "specforge": [2, 12, 22],
            "speculators": [2, 12, 21],
            "eagle": [2, 12, 21],
        },
        {},
        {"eagle": "EAGLE computes head_dim"},
    ),
    "specforge-deepseek-v3": (
        "specforge-deepseek-v3-671b-eagle3",
        61,
        "specforge",
        {
            "sglang": [2, 30, 58],
            "vllm": [1, 29, 57],
            "vllm-v2": [2, 30, 58],
            "specforge": [2, 30, 58],
            "speculators": [2, 30, 58],
            "eagle": [2, 30, 58],
        },
        {},
        {},
    ),
    "eagle-release": ("eagle-traineagle3-llama3.1-8b", 8, "eagle", dict.fromkeys(ENGINES, DEFAULT8), {}, {}),
    "angelslim-qwen3-8b": (
        "angelslim-qwen3-8b-eagle3",
        8,
        "specforge",
        dict.fromkeys(ENGINES, DEFAULT8),
        {},
        {},
    ),
    "modelopt-export": (  # the export template, nulls filled; nested ids; layers.0.* names
        "modelopt-llama-eagle3-export-template",
        8,
        "speculators",
        {
            "sglang": [2, 5, 7],
            "vllm": [1, 4, 6],
            "vllm-v2": DEFAULT8,
            "specforge": [2, 5, 7],
            "speculators": DEFAULT8,
            "eagle": DEFAULT8,
        },
        {},
        {},
    ),
    "speculators-qwen3-32b": (  # norm_before_residual true, no aux ids
        "speculators-qwen3-32b-eagle3-as-in-sglang-test",
        8,
        "speculators",
        dict.fromkeys(ENGINES, DEFAULT8),
        {
            "vllm": {"norm_before_residual"},
            "vllm-v2": {"norm_before_residual"},
            "speculators": {"norm_before_residual"},
        },
        {},
    ),
    "speculators-2026-qwen3-layer": (  # top-level [1, 4, 7], norm_before_fc, norm_output, trained embedding, q/k norm
        "speculators-2026-qwen3-layer",
        8,
        "speculators",
        {
            "sglang": DEFAULT8,
            "vllm": [1, 4, 7],
            "vllm-v2": [1, 4, 7],
            "specforge": DEFAULT8,
            "speculators": [1, 4, 7],
            "eagle": DEFAULT8,
        },
        {
            "sglang": {"norm_before_fc", "post_norm_feedback"},  # after PRs #24663 and #32334
            "vllm": {"norm_before_fc", "post_norm_feedback", "own_embedding", "qk_norm"},
            "vllm-v2": {"norm_before_fc", "post_norm_feedback", "own_embedding", "qk_norm"},
            "speculators": {"norm_before_fc", "post_norm_feedback", "own_embedding", "qk_norm"},
            "eagle": {"own_embedding"},
        },
        {},
    ),
    "speculators-sharded": (
        "speculators-qwen3-32b-eagle3-as-in-sglang-test",
        8,
        "sharded",
        dict.fromkeys(ENGINES, DEFAULT8),
        {
            "vllm": {"norm_before_residual"},
            "vllm-v2": {"norm_before_residual"},
            "speculators": {"norm_before_residual"},
        },
        {},
    ),
}


def shrink(config: dict, style: str) -> dict:
    """The published config with small sizes (every field name kept)."""
    config = {k: v for k, v in json.loads(json.dumps(config)).items() if k != "_source"}
    small = dict(SMALL)
    if style == "specforge-gpt-oss-20b":
        small["head_dim"] = 24  # like gpt-oss: heads x head_dim (96) != hidden (64)
    if "draft_vocab_size" in config:
        config["draft_vocab_size"] = 128
    layer = config.get("transformer_layer_config")
    where = layer if isinstance(layer, dict) else config
    for key in list(where):
        if key in small:
            where[key] = small[key]
    if "head_dim" in where:
        where["head_dim"] = small.get("head_dim", 16)
    elif "head_dim" in small:
        where["head_dim"] = small["head_dim"]
    for key, value in small.items():
        where.setdefault(key, value)
    where["max_position_embeddings"] = 2048
    if style == "modelopt-export":  # the template's nulls, filled as an export fills them
        config.update(
            hidden_act="silu",
            rms_norm_eps=1e-5,
            num_hidden_layers=1,
            rope_theta=10000.0,
            head_dim=16,
            attention_bias=False,
            mlp_bias=False,
            draft_vocab_size=128,
            initializer_range=0.02,
        )
        config = {k: v for k, v in config.items() if v is not None}
        config["eagle_config"] = {
            "eagle_aux_hidden_state_layer_ids": [1, 4, 6],
            "use_aux_hidden_state": True,
            "use_input_layernorm_in_first_layer": True,
            "use_last_layernorm": True,
            "use_mtp_layernorm": False,
            "next_layer_regular": True,
            "parallel_draft_step": 1,
            "parallel_draft_heads_num_layers": 1,
        }
    return config


def write_style(root: Path, style: str, target_dir: Path):
    """The draft directory of a style: config.json as published (shrunk) and random weights in the
    style's tensor names and file format."""
    import torch
    from safetensors.torch import save_file

    from backend.drafts.draft_config import parse_draft_config
    from backend.engine.draft_model import Eagle3Draft

    published, _, layout, *_ = STYLES[style]
    config = shrink(PUBLISHED[published], style)
    parsed = parse_draft_config(config)
    torch.manual_seed(sum(map(ord, style)))
    module = Eagle3Draft(parsed, target_embedding=None)
    tensors = {}
    for name, tensor in module.state_dict().items():
        if name == "d2t":
            continue
        tensors[name] = torch.randn(tensor.shape) * (
            2.0 / tensor.shape[-1] ** 0.5 if tensor.ndim == 2 else 0.3
        ) + (1.0 if tensor.ndim == 1 else 0.0)
    if parsed.draft_vocab_size < parsed.vocab_size:
        used = (
            torch.randperm(parsed.vocab_size, generator=torch.Generator().manual_seed(3))[:128].sort().values
        )
        tensors["d2t"] = used - torch.arange(128)
        t2d = torch.zeros(parsed.vocab_size, dtype=torch.bool)
        t2d[used] = True
        tensors["t2d"] = t2d
    if style == "speculators-2026-qwen3-layer":  # a trained embedding (embed_requires_grad)
        tensors["embed_tokens.weight"] = torch.randn(parsed.vocab_size, parsed.hidden_size)
    draft_dir = root / style
    draft_dir.mkdir(parents=True)
    (draft_dir / "config.json").write_text(json.dumps(config))
    named = {}
    for name, tensor in tensors.items():  # names as each tool writes them
        if layout in ("specforge", "eagle") and name.startswith("layers.0."):
            name = "midlayer." + name[len("layers.0.") :]
        named[name] = tensor.contiguous()
    if layout == "eagle":
        torch.save(named, draft_dir / "pytorch_model.bin")
    elif layout == "sharded":
        first = {n: t for n, t in named.items() if n.startswith("layers.")}
        second = {n: t for n, t in named.items() if n not in first}
        save_file(first, str(draft_dir / "model-00001-of-00002.safetensors"))
        save_file(second, str(draft_dir / "model-00002-of-00002.safetensors"))
        weight_map = {n: "model-00001-of-00002.safetensors" for n in first}
        weight_map.update({n: "model-00002-of-00002.safetensors" for n in second})
        (draft_dir / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    else:
        save_file(named, str(draft_dir / "model.safetensors"))
    return draft_dir, config, named


# ------------------------------------------------------------------------ the independent reference


def rms(x, weight, eps):
    import torch

    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)) * weight.float()


def reference_drafts(target, prompt, first_token, raw, config, aux, switches, steps=2):
    """d_1..d_steps of the first verify step, computed plainly from the raw tensors:
    fc over the fused target states, [norm(emb), norm(g)], attention with RoPE at positions 0..n-1
    then n.., residual, MLP, norm, lm_head, d2t; `switches` turn on an engine's variants."""
    import torch

    t = {n.replace("midlayer.", "layers.0."): v.float() for n, v in raw.items()}
    layer = config.get("transformer_layer_config") or config
    heads, kv_heads = layer["num_attention_heads"], layer["num_key_value_heads"]
    head_dim = layer.get("head_dim") or layer["hidden_size"] // heads
    eps = layer.get("rms_norm_eps", 1e-6)
    theta = float(layer.get("rope_theta") or 10000.0)
    with torch.no_grad():
        states = target.model(input_ids=torch.tensor([prompt]), output_hidden_states=True).hidden_states
        features = torch.cat([states[i][0] for i in aux], dim=-1)
        if "fc_norm" in switches:
            features = torch.cat(
                [rms(c, t[f"fc_norm.{k}.weight"], eps) for k, c in enumerate(features.chunk(3, -1))], -1
            )
        if "norm_before_fc" in switches:
            features = rms(features, t["input_norm.weight"], eps)
        hidden = features @ t["fc.weight"].T
        table = (
            t["embed_tokens.weight"]
            if "own_embedding" in switches
            else target.model.get_input_embeddings().weight
        )
        keys, values, drafted = [], [], []
        tokens = list(prompt[1:]) + [first_token]
        positions = list(range(len(prompt)))
        for _ in range(steps):
            emb = table[torch.tensor(tokens)].float()
            normed_hidden = rms(hidden, t["layers.0.hidden_norm.weight"], eps)
            u = torch.cat([rms(emb, t["layers.0.input_layernorm.weight"], eps), normed_hidden], -1)
            q = (u @ t["layers.0.self_attn.q_proj.weight"].T).view(len(tokens), heads, head_dim)
            k = (u @ t["layers.0.self_attn.k_proj.weight"].T).view(len(tokens), kv_heads, head_dim)
            v = (u @ t["layers.0.self_attn.v_proj.weight"].T).view(len(tokens), kv_heads, head_dim)
            if "qk_norm" in switches:
                q, k = (
                    rms(q, t["layers.0.self_attn.q_norm.weight"], eps),
                    rms(k, t["layers.0.self_attn.k_norm.weight"], eps),
                )
            inv = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
            angles = torch.tensor(positions).float()[:, None] * inv[None]
            cos, sin = torch.cat([angles.cos()] * 2, -1)[:, None], torch.cat([angles.sin()] * 2, -1)[:, None]
            rotate = lambda x: torch.cat([-x[..., head_dim // 2 :], x[..., : head_dim // 2]], -1)  # noqa: E731
            q, k = q * cos + rotate(q) * sin, k * cos + rotate(k) * sin
            keys.append(k), values.append(v)
            all_k, all_v = torch.cat(keys), torch.cat(values)
            all_k = all_k.repeat_interleave(heads // kv_heads, dim=1)
            all_v = all_v.repeat_interleave(heads // kv_heads, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q, all_k) / head_dim**0.5
            past = all_k.shape[0] - len(tokens)
            causal = torch.arange(all_k.shape[0])[None, :] <= (torch.arange(len(tokens))[:, None] + past)
            attended = torch.einsum(
                "hqk,khd->qhd", scores.masked_fill(~causal, float("-inf")).softmax(-1), all_v
            )
            residual = normed_hidden if "norm_before_residual" in switches else hidden
            r = residual + attended.reshape(len(tokens), -1) @ t["layers.0.self_attn.o_proj.weight"].T
            m = rms(r, t["layers.0.post_attention_layernorm.weight"], eps)
            gate, up = m @ t["layers.0.mlp.gate_proj.weight"].T, m @ t["layers.0.mlp.up_proj.weight"].T
            out = r + (torch.nn.functional.silu(gate) * up) @ t["layers.0.mlp.down_proj.weight"].T
            last = out[-1:]
            index = int((rms(last, t["norm.weight"], eps) @ t["lm_head.weight"].T).argmax())
            drafted.append(index + int(t["d2t"][index]) if "d2t" in t else index)
            hidden = rms(last, t["norm.weight"], eps) if "post_norm_feedback" in switches else last
            tokens, positions = [drafted[-1]], [positions[-1] + 1]
    return drafted


# Each repeats the expectations of a fast case (specforge-llama3-8b's; deepseek's defaults on 61
# layers; speculators-qwen3-32b's config, sharded): they run with the whole suite.
SLOW_STYLES = {"specforge-qwen3-8b", "specforge-deepseek-v3", "speculators-sharded"}


@pytest.mark.parametrize(
    "style", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW_STYLES else s for s in STYLES]
)
def test_every_engine_reads_each_published_style(style, tmp_path):
    from backend.drafts.readings import read_as
    from backend.engine.loading import load_target
    from backend.engine.preflight import load_checked_draft, preflight
    from backend.engine.replay import ReplayConfig, output_ids_of, replay
    from tests.support.oracle import plain_greedy
    from tests.support.synthetic import TargetShape, make_target

    _, layers, _, expected_aux, switches, refusals = STYLES[style]
    shape = TargetShape(num_layers=layers, hidden=64, vocab=256, heads=4, kv_heads=2)
    make_target(tmp_path / "target", shape, seed=layers)
    target = load_target(tmp_path / "target", device="cpu", dtype="fp32")
    draft_dir, config, raw = write_style(tmp_path / "drafts", style, tmp_path / "target")
    report = preflight(draft_dir, tmp_path / "target")
    assert report.ok, [c.message for c in report.failures()]
    assert not [c for c in report.checks if c.name == "config keys" and c.status == "warn"], "unknown keys"
    draft, _ = load_checked_draft(draft_dir, target)
    prompt = [5, 9, 2, 77, 31, 8]
    greedy = plain_greedy(target, prompt, 12)  # 12 tokens: several verify steps of K = 4 per engine
    for engine in ENGINES:
        view = read_as(
            engine, draft.config, layers, draft.own_embedding is not None, draft.own_embedding_differs
        )
        assert report.result().to_dict()["engines"][engine]["aux_hf_indices"] == expected_aux[engine], engine
        if engine in refusals:
            assert not view.loads and refusals[engine] in view.refusal
            continue
        assert view.loads and list(view.wiring.aux_hf_indices) == expected_aux[engine], engine
        records = list(replay(target, draft, prompt, view.wiring, ReplayConfig(4, 12, math=view.math)))
        assert output_ids_of(records) == greedy, engine
        first_step = records[1]
        expected = reference_drafts(
            target, prompt, greedy[0], raw, config, expected_aux[engine], switches.get(engine, set()), steps=4
        )
        assert first_step.drafted_ids == expected, engine
        if switches.get(engine):  # the check can tell this engine's math from the plain layer's
            plain = reference_drafts(
                target, prompt, greedy[0], raw, config, expected_aux[engine], set(), steps=4
            )
            assert plain != expected, f"{engine}: the variants do not change the drafts of this fixture"


def test_the_default_reading_honours_declared_flags_the_training_engine_drops():
    """A SpecForge-architecture config declaring norm_before_fc: SpecForge has no such module, so the
    default reading applies it as vLLM does (and says so) instead of dropping it."""
    from backend.drafts.draft_config import parse_draft_config
    from backend.drafts.readings import read_as

    config = parse_draft_config(
        {
            "architectures": ["LlamaForCausalLMEagle3"],
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_hidden_layers": 1,
            "vocab_size": 100,
            "norm_before_fc": True,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]},
        }
    )
    auto = read_as("auto", config, 8, has_own_embedding=False)
    assert (
        auto.math.norm_before_fc
        and not read_as("specforge", config, 8, has_own_embedding=False).math.norm_before_fc
    )
    assert any("norm_before_fc declared" in note for note in auto.notes)
    assert list(auto.wiring.aux_hf_indices) == [2, 4, 6]  # nested ids: the training reading's own
