"""How each engine reads a DFlash draft (torch-free), each rule beside the source it follows.

All of them read z-lab layer id t as HF hidden_states[t + 1] (the output of decoder layer t):
- z-lab: dflash/model.py `extract_context_feature` (offset 1);
- llama.cpp 11434: the converter writes `dflash.target_layers` = t + 1 (conversion/qwen.py
  `DFlashModel.set_gguf_parameters`) and the target keeps the *input* of that layer
  (common/speculative.cpp `common_speculative_impl_draft_dflash`, `llama_set_embeddings_layer_inp`);
- vLLM 0.32: v1/worker/gpu_model_runner.py `_get_eagle3_aux_layers_from_config` ("Add 1 to convert
  DFlash's aux layer id semantics"), captured after layer t (model_executor/models/interfaces.py).
They differ in:
- the block: the engines verify K + 1 tokens whatever `block_size` the draft was trained on (vLLM's
  v1/spec_decode/dflash.py, `num_query_per_req = 1 + K`; llama.cpp's `n_draft + 1`, with K clamped to
  block_size - 1 and only a log line, common/speculative.cpp's constructor); with attention both ways
  inside the block, every draft changes with K;
- the end of a generation: llama.cpp decodes the whole block and keeps min(K, tokens left - 1) drafts
  (`common_speculative_draft` "truncating draft"; server-context.cpp `get_n_draft_max`), vLLM drafts K;
- the last target layer (t = N - 1): transformers gives the final-normed state, vLLM the raw stream,
  llama.cpp aborts (src/llama-graph.cpp `set_outputs`: "layer input tensor is null");
- the mask id: llama.cpp reads only `dflash_config.mask_token_id` and turns an id past the tokenizer into
  -1 (src/llama-vocab.cpp), after which no draft decodes; vLLM and z-lab fail on an id past the
  embedding;
- rope_theta absent: 10000 in all three here (transformers 5.x fills Qwen3Config's default before vLLM's
  `set_default_rope_theta(config, 1e6)` runs; llama.cpp's loader default, src/llama-model.cpp);
- KV precision: llama.cpp keeps the draft's (and target's) KV in F16 unless `-ctkd/-ctvd f32`.
"""

from __future__ import annotations

from backend.drafts.dflash_config import DFlashConfig
from backend.drafts.engine_readers import DraftMath
from backend.run.wiring import Wiring


def dflash_reading(engine: str | None, config: DFlashConfig, num_target_layers: int) -> dict:
    """`engine`'s reading of a DFlash draft, as EngineView's fields (readings.dflash_view builds it):
    its wiring, accounting, refusal and notes."""
    name = "specforge" if engine in (None, "", "auto") else engine
    wiring = Wiring(
        config.aux_hf_indices,
        f"dflash_config.target_layer_ids {config.target_layer_ids} (z-lab ids; HF index = id + 1)"
        + (
            ""
            if config.layer_ids_declared
            else f", derived from num_target_layers {config.num_target_layers}"
        ),
    )
    notes, refusal = [], None
    last = num_target_layers - 1
    if last in config.target_layer_ids:
        if name == "llamacpp":
            refusal = (
                f"target layer {last} is the target's last: llama.cpp keeps layer inputs and has none past it "
                "(src/llama-graph.cpp set_outputs aborts: 'layer input tensor is null')"
            )
        elif name.startswith("vllm"):
            notes.append(
                f"target layer {last} is the last: vLLM feeds its raw output, transformers (training) the normed one"
            )
        else:
            notes.append(f"target layer {last} is the last: transformers gives the final-normed state there")
    if config.rope_theta is None:
        notes.append(
            "rope_theta is absent: 10000 assumed (Qwen3Config's default; vLLM and llama.cpp read the same here)"
        )
    if config.mask_token_id is None:
        refusal = refusal or "dflash_config.mask_token_id is absent: the block's masked slots have no token"
    return dict(
        engine=name,
        wiring=wiring,
        math=DraftMath(),
        vocab_mapping="none: the target's own head",
        loads=refusal is None,
        refusal=refusal,
        notes=tuple(notes),
        accounting="llamacpp" if name == "llamacpp" else "fixed-k",
    )


def block_note(config: DFlashConfig, num_steps: int) -> str | None:
    """What a K other than the trained block's does, or None when K + 1 is the trained block."""
    if num_steps == config.num_drafts:
        return None
    return (
        f"K = {num_steps}: the engines verify a block of {num_steps + 1}, the draft was trained on block_size "
        f"{config.block_size} (K = {config.num_drafts}); attention runs both ways inside the block, so every draft "
        f"changes with K (llama.cpp clamps K to {config.num_drafts} with a log line; vLLM runs any K)"
    )
