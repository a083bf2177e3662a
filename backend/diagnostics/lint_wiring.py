"""The lint's wiring rules: which config field, in which convention, each engine reads the aux
layer ids from (docs/reference.md §2), against the declared wiring or the one the probe found."""

from __future__ import annotations

from backend.data.serving_command import TargetFacts
from backend.drafts.draft_config import DraftConfig
from backend.run.wiring import default_hf_indices


def aux_ids(engine: str, config: DraftConfig, target: TargetFacts, add) -> None:
    nested, top = config.nested_aux_ids, config.top_level_aux_ids
    layers = target.num_layers
    defaults = default_hf_indices(layers) if layers else None
    nested_hf = [i + 1 for i in nested] if nested is not None else None
    if nested is not None and top is not None and list(top) != nested_hf:
        same = list(top) == list(nested)
        add(
            "error",
            "aux-ids-disagree",
            f"The draft declares aux ids twice: nested {nested} (output-of-layer: HF {nested_hf}) and top-level "
            f"{top} (HF indices). SGLang uses HF {nested_hf}, vLLM uses HF {top}"
            + (": the same list in both fields selects layers one apart (vLLM PR #43671)." if same else "."),
            "Keep the wiring the draft was trained on (python -m backend probe tells which) and write it as "
            "nested ids = HF - 1 and top-level ids = HF.",
        )
    if engine == "sglang":
        if nested is None and top is not None:
            fallback = f"HF {defaults}" if defaults else "the defaults HF [2, L//2, L-3]"
            severity = "info" if defaults == list(top) else "warning"
            add(
                severity,
                "aux-ids-field",
                f"SGLang reads eagle_config.eagle_aux_hidden_state_layer_ids; this draft only has the top-level "
                f"field {top} (vLLM's), so SGLang falls back to {fallback}.",
                f'Add "eagle_config": {{"eagle_aux_hidden_state_layer_ids": {[i - 1 for i in top]}}} '
                "(output-of-layer ids = HF - 1).",
            )
        if nested is not None and defaults and list(nested) == defaults and nested_hf != defaults:
            add(
                "warning",
                "aux-ids-convention",
                f"Nested ids {nested} equal the default HF indices for L={layers}, but the nested field is read "
                f"as output-of-layer ids: SGLang selects HF {nested_hf}, one layer above each default.",
                f"If the draft was trained on the defaults write {[i - 1 for i in defaults]} in eagle_config.",
            )
    else:
        if top is None and nested is not None:
            # engine_readers.py vllm_v1_wiring / vllm_v2_wiring: vLLM 0.32's V1 runner (its CPU build) reads the
            # nested ids as HF indices, its V2 runner (the GPU default) ignores them for the defaults.
            fallback = f"HF {defaults}" if defaults else "the defaults HF [2, L//2, L-3]"
            v1_right, v2_right = list(nested) == nested_hf, defaults == nested_hf
            severity = "info" if v1_right and v2_right else "error"
            add(
                severity,
                "aux-ids-field",
                f"This draft has only the nested eagle_config ids {nested} (trained, as SGLang and SpecForge read "
                f"them, on HF {nested_hf}). vLLM 0.32's V1 runner (the CPU build, VLLM_USE_V2_MODEL_RUNNER=0) "
                f"reads them as HF indices: HF {list(nested)}"
                + ("" if v1_right else ", every state one layer low")
                + f"; its V2 runner (the GPU default) ignores them and uses {fallback}"
                + (
                    " — the same layers, by luck."
                    if v2_right
                    else " (vLLM PR #50170: acceptance 1.2%, accept length 1.04)."
                ),
                f'Add top-level "eagle_aux_hidden_state_layer_ids": {nested_hf} (HF indices): both runners read it '
                "first.",
            )
        if top is not None and defaults and [i + 1 for i in top] == defaults and list(top) != defaults:
            add(
                "warning",
                "aux-ids-convention",
                f"Top-level ids {top} equal the defaults written as output-of-layer ids for L={layers}, but vLLM "
                f"reads them as HF indices: it selects HF {top}, one layer below each default.",
                f"If the draft was trained on the defaults write {defaults} at the top level.",
            )


def served_hf(engine: str, config: DraftConfig, num_layers: int | None) -> list[int] | None:
    """The HF indices an engine feeds this draft (docs/reference.md §2): SGLang reads the nested
    output-of-layer ids (+1), vLLM the top-level HF ids; either falls back to the defaults."""
    nested, top = config.nested_aux_ids, config.top_level_aux_ids
    if engine == "sglang" and nested is not None:
        return [i + 1 for i in nested]
    if engine != "sglang" and top is not None:
        return list(top)
    return default_hf_indices(num_layers) if num_layers else None


def served_by(engine: str, config: DraftConfig, num_layers: int | None) -> list[tuple[list[int] | None, str]]:
    """What each runner of `engine` feeds this draft, in words: one entry, except vLLM 0.32 on a draft
    with only nested ids, where its V1 runner (the CPU build) reads them as HF indices and its V2
    runner (the GPU default) ignores them for the defaults (engine_readers.py vllm_v1_wiring /
    vllm_v2_wiring, the same split `aux_ids` states), so the lint names both, as preflight does."""
    nested, top = config.nested_aux_ids, config.top_level_aux_ids
    if engine != "sglang" and top is None and nested is not None:
        return [
            (list(nested), "its V1 runner, the CPU build"),
            (default_hf_indices(num_layers) if num_layers else None, "its V2 runner, the GPU default"),
        ]
    return [(served_hf(engine, config, num_layers), "from the draft's config")]


def aux_ids_against(
    engine: str, config: DraftConfig, target: TargetFacts, trained: list[list[int]], add
) -> None:
    """The wiring findings once the trained layers are known (`trained`: the probe's best, then the
    wirings it could not tell from the best): never suggest the declared wiring when the probe rejected
    it; say what to write so that this engine feeds the trained layers, and when several wirings are
    within the probe's noise, name them all and say which check settles it."""
    feeds = served_by(engine, config, target.num_layers)
    served = " or ".join(str(w) for w, _ in feeds)
    name = "SGLang" if engine == "sglang" else "vLLM"
    best = trained[0]
    found = " or ".join(f"HF {w}" for w in trained)
    if all(w in trained for w, _ in feeds):
        feeds_trained(name, served, trained, add)
        return
    ties = (
        ""
        if len(trained) == 1
        else f" The probe cannot tell {found} apart on its samples, so this lint writes none of them yet."
    )
    add(
        "error",
        "aux-ids-not-trained",
        f"The wiring probe found this draft trained on {found}, but {name} will feed "
        + " or ".join(f"HF {w} ({who})" for w, who in feeds)
        + f": the draft sees layers it was never trained on.{ties}",
        f'Write the trained wiring in both fields: "eagle_config": {{"eagle_aux_hidden_state_layer_ids": '
        f"{[i - 1 for i in best]}}} (SGLang, output-of-layer ids = HF - 1) and top-level "
        f'"eagle_aux_hidden_state_layer_ids": {best} (vLLM, HF indices).'
        if len(trained) == 1
        else f"Separate {found} first: run the wiring probe on more samples (python -m backend probe --samples "
        "FILE --limit 32) or hold the served features against the draft's training features (Train vs serve); "
        "then write the one it separates in both fields (nested SGLang ids = HF - 1, top-level vLLM ids = HF).",
    )


def feeds_trained(name: str, served: str, trained: list[list[int]], add) -> None:
    """The finding when an engine (`name`) feeds (`served`, in words) one of the wirings the probe found this
    draft trained on (`trained`: its best, then those it could not tell apart)."""
    found = " or ".join(f"HF {w}" for w in trained)
    add(
        "info",
        "aux-ids-trained",
        f"{name} feeds HF {served}, "
        + (
            "the layers the wiring probe found this draft trained on."
            if len(trained) == 1
            else f"one of the wirings the probe found this draft trained on ({found}: it cannot tell them apart)."
        ),
        "Nothing to change for the wiring.",
    )
