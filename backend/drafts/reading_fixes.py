"""Where the engines' readings of one draft part ways, and the config change that makes a serving
engine feed the trained wiring (the readings themselves: readings.py)."""

from __future__ import annotations

from backend.drafts.readings import DESCRIPTIONS, SERVING_ENGINES, EngineView

SERVING_NAMES = {
    "sglang": "SGLang",
    "vllm": "vLLM 0.32 (V1 runner: the CPU build, VLLM_USE_V2_MODEL_RUNNER=0)",
    "vllm-v2": "vLLM 0.32 (V2 runner: the GPU default)",
    "llamacpp": "llama.cpp (llama-server, --spec-type draft-eagle3, the GGUF from its converter)",
}


def wiring_fix(engine: str, trained: list[int]) -> tuple[str, dict]:
    """The config.json change that makes `engine` feed the trained HF indices: (words, keys to set).
    vLLM and llama.cpp: a top-level eagle_aux_hidden_state_layer_ids, read first by both vLLM runners
    (vllm_v1_wiring, vllm_v2_wiring) and by llama.cpp's converter (llamacpp_wiring), in HF indices in
    all three: one list serves both engines; SGLang: eagle_config ids = HF - 1 (_sglang)."""
    if engine == "sglang":
        nested = [i - 1 for i in trained]
        return (
            f'set "eagle_config": {{"eagle_aux_hidden_state_layer_ids": {nested}}} (output-of-layer ids = HF - 1)',
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": nested}},
        )
    return (
        f'add top-level "eagle_aux_hidden_state_layer_ids": {trained} (HF indices; vLLM (both runners) and '
        "llama.cpp's converter read it first)"
        + (", then convert the draft to GGUF again" if engine == "llamacpp" else ""),
        {"eagle_aux_hidden_state_layer_ids": list(trained)},
    )


def serving_wiring_findings(views: dict[str, EngineView], trained: list[int]) -> list[dict]:
    """Each serving engine that feeds other states than the draft was trained on, with the fix."""
    found = []
    for engine in SERVING_ENGINES:
        fed = list(views[engine].wiring.aux_hf_indices)
        if fed != list(trained):
            words, keys = wiring_fix(engine, trained)
            problem = f"{SERVING_NAMES[engine]} feeds HF {fed}; trained on HF {list(trained)}."
            found.append(
                {
                    "engine": engine,
                    "fed": fed,
                    "trained": list(trained),
                    "problem": problem,  # the finding's words; `message` adds the fix (preflight prints it)
                    "message": f"{problem} Fix: {words}",
                    "config_update": keys,
                }
            )
    return found


def describe_layers(indices) -> str:
    return ", ".join("the embedding output" if i == 0 else f"the output of layer {i - 1}" for i in indices)


def disagreements(views: dict[str, EngineView], training: str) -> list[dict]:
    """Where two readings of the same draft differ, in the user's words: every serving engine against
    the training reading, and the serving engines against each other."""
    found = []
    pairs = [(serving, training) for serving in SERVING_ENGINES if serving != training]
    pairs += [("sglang", "vllm")]
    for engine, reference in pairs:
        a, b = views[engine], views[reference]
        for position, (fed, trained) in enumerate(
            zip(a.wiring.aux_hf_indices, b.wiring.aux_hf_indices, strict=True)
        ):
            if fed != trained:
                found.append(
                    {
                        "engines": [engine, reference],
                        "what": "wiring",
                        "message": f"on {DESCRIPTIONS[engine]} this draft's aux state {position} is "
                        f"{describe_layers([fed])} (HF {fed}) where {DESCRIPTIONS[reference]} uses "
                        f"{describe_layers([trained])} (HF {trained})",
                    }
                )
        for field_name, words in (
            ("post_norm_feedback", "the hidden fed back to the next draft step"),
            ("norm_before_lm_head", "the norm before lm_head"),
            ("fc_norm", "the per-chunk fc_norm"),
            ("norm_before_fc", "the norm before fc"),
            ("norm_before_residual", "the norm before the residual"),
            ("own_embedding", "the embedding"),
            ("qk_norm", "q/k norms"),
        ):
            x, y = getattr(a.math, field_name), getattr(b.math, field_name)
            if x != y:
                render = {
                    "post_norm_feedback": lambda v: "post-norm" if v else "pre-norm",
                    "own_embedding": lambda v: "the draft's own" if v else "the target's",
                }.get(field_name, lambda v: "applied" if v else "not applied")
                found.append(
                    {
                        "engines": [engine, reference],
                        "what": field_name,
                        "message": f"{words}: {DESCRIPTIONS[engine]} {render(x)}, {DESCRIPTIONS[reference]} {render(y)}",
                    }
                )
        if a.loads != b.loads:
            found.append({"engines": [engine, reference], "what": "loads", "message": a.refusal or b.refusal})
    return found
