"""The checks a diagnosis runs without samples: preflight's failures by class and the engines'
readings, the vocabulary mapping and its coverage, the context window, the target's precision."""

from __future__ import annotations

import json

import torch

from backend.diagnostics.draft_head import is_head_check, missing_head_fix
from backend.diagnostics.findings import Finding
from backend.diagnostics.reading_probe import rope_scaling
from backend.drafts.reading_fixes import wiring_fix
from backend.drafts.readings import SERVING_ENGINES, VARIANT_FLAGS
from backend.engine.teacher import (
    draft_vocab_mask,
)

PREFLIGHT_CLASSES = {
    "d2t": "vocab-mapping",
    "t2d": "vocab-mapping",
    "draft vocab": "vocab-mapping",
    "wiring": "aux-wiring",
    "fc width": "aux-wiring",
    "target hidden": "aux-wiring",
    "variant": "variant-flags",
    "dtype": "precision",
    "dtypes": "precision",
    "values": "precision",
    "context": "rope / context-window",
}


def preflight_findings(report: dict, engine: str) -> list[Finding]:
    """Failed checks by class; where the engines read the draft differently from its training reading:
    a fail for the serving engine under test (`engine`: --engine, or the serving command's engine),
    the cause for a user who serves with it; a warning for each when none is named (an info would let
    a draft vLLM misreads pass as OK, when the user's bad accept length may be vLLM's)."""
    found = []
    for check in report.get("checks", []):
        if check["status"] == "fail":
            head = is_head_check(check)
            cls = "draft-head" if head else PREFLIGHT_CLASSES.get(check["name"], "variant-flags")
            found.append(
                Finding(
                    cls,
                    "fail",
                    f"preflight {check['name']}: {check['message']}",
                    {"check": check},
                    " ".join(
                        filter(None, [head and missing_head_fix(check), _missing_flag_fix(check["message"])])
                    )
                    or _preflight_fix(cls),
                )
            )
    training = report.get("training_engine")
    serving = engine if engine in SERVING_ENGINES else None
    for fix in report.get("serving_fixes", []):  # reading_fixes.serving_wiring_findings: one per engine
        if serving and fix["engine"] != serving:
            continue
        found.append(
            Finding(
                "aux-wiring",
                "fail" if serving else "warn",  # named: the engine under test; else what each would do
                f"served by {fix['engine']}: {fix.get('problem') or fix['message']}"
                + ("" if serving else " Serving with it, that is the cause of a low accept length."),
                {"engine": fix["engine"], "fed": fix["fed"], "trained": fix["trained"]},
                f"In the draft's config.json: {wiring_fix(fix['engine'], fix['trained'])[0]} "
                f"(python -m backend preflight --engine {fix['engine']} --write-fix OUT writes the copy).",
            )
        )
    for item in report.get("disagreements", []):
        if training not in item["engines"] or (serving and serving not in item["engines"]):
            continue
        if item["what"] == "wiring" and "serving_fixes" in report:
            continue  # said once per engine above, with its fix
        other = next(e for e in item["engines"] if e != training)
        cls = "aux-wiring" if item["what"] == "wiring" else "variant-flags"
        severity = "fail" if serving and item["what"] != "own_embedding" else "warn"
        found.append(
            Finding(
                cls,
                severity,
                f"served by {other}: {item['message']}",
                {"engines": item["engines"], "what": item["what"]},
                _reading_fix(item["what"], other, report),
            )
        )
    return found


# The weights a variant flag adds to the draft (backend/engine/draft_model.py): declared true with
# those weights missing, the flag was not on in training.
FLAG_TENSORS = {"input_norm.": "norm_before_fc", "fc_norm.": "fc_norm"}


def _missing_flag_fix(message: str) -> str | None:
    """A missing-tensors failure whose tensors belong to a declared flag: the field and value to undo it."""
    if "missing tensors" not in message:
        return None
    missing = message.split(":", 1)[-1]
    flags = sorted({flag for prefix, flag in FLAG_TENSORS.items() if prefix in missing})
    if not flags:
        return None
    return (
        "In the draft's config.json set "
        + ", ".join(f'"{flag}": false' for flag in flags)
        + ": the checkpoint has none of the weights that flag adds, so the draft was trained without it "
        "(declared true, every engine would run those weights at random)."
    )


def _preflight_fix(cls: str) -> str:
    return {
        "vocab-mapping": "Export the draft with its d2t/t2d maps (SpecForge writes both when draft_vocab_size < vocab_size).",
        "aux-wiring": "Pair the draft with the target it was trained on, or declare the aux ids it was trained on.",
        "precision": "Re-export the weights; non-finite values mean the checkpoint is corrupt.",
    }.get(cls, "Fix the checkpoint so that preflight passes; nothing else means anything until it loads.")


def _reading_fix(what: str, engine: str, report: dict) -> str:
    trained = report.get("aux_hf_indices")
    if what == "wiring" and trained:
        nested = [i - 1 for i in trained]
        return (
            f"Make {engine} read the layers the training reading feeds (HF {trained}): declare both "
            f"eagle_config.eagle_aux_hidden_state_layer_ids = {nested} (SGLang, output-of-layer ids) and top-level "
            f"eagle_aux_hidden_state_layer_ids = {trained} (vLLM, HF indices)."
        )
    field_name = READING_FIELDS.get(what, what)
    trained_value = (report.get("engines", {}).get(report.get("training_engine"), {}) or {}).get(what)
    if field_name in VARIANT_FLAGS and isinstance(trained_value, bool):
        return (
            f'In the draft\'s config.json set "{field_name}": {json.dumps(trained_value)}: the value its training '
            f"reading ({report.get('training_engine')}) ran; {engine} applies the flag as the config declares it."
        )
    return f"Serve with an engine (release) that reads this field as training did, or re-export the config for {engine}."


# A reading's name -> the config field that sets it, where they differ (readings.VARIANT_FLAGS).
READING_FIELDS = {"norm_before_lm_head": "norm_output"}


def vocab_findings(draft, target_vocab: int, samples: list, num_steps: int) -> list[Finding]:
    found = []
    config = draft.config
    d2t = draft.d2t
    if config.draft_vocab_size < target_vocab and draft.has_vocab_mapping and bool((d2t == 0).all()):
        found.append(
            Finding(
                "vocab-mapping",
                "fail",
                f"d2t is all zeros under a smaller draft vocabulary ({config.draft_vocab_size} < {target_vocab}): "
                f"every engine maps draft id d to target id d, so proposals land on the first {config.draft_vocab_size} "
                "target ids (vLLM scatters logits to arange + d2t, SGLang builds hot_token_id = d2t + arange)",
                {"draft_vocab_size": config.draft_vocab_size, "target_vocab": target_vocab},
                "Rebuild d2t from the draft vocabulary the draft was trained with (d2t[d] = target_id(d) - d).",
            )
        )
    if samples:
        in_vocab = draft_vocab_mask(draft, target_vocab, torch.device("cpu"))
        tokens = [
            t
            for s in samples
            for t, m in zip(s.input_ids, s.loss_mask, strict=False)
            if m and t < target_vocab
        ]
        if tokens:
            outside = sum(not bool(in_vocab[t]) for t in tokens) / len(tokens)
            coverage = 1 - outside
            ceiling = sum(coverage**k for k in range(num_steps + 1))
            severity = "warn" if outside > 0.1 else "info"
            found.append(
                Finding(
                    "vocab-mapping",
                    severity,
                    f"{100 * outside:.1f}% of the target's tokens on these samples lie outside the draft vocabulary "
                    f"and can never be proposed: accept length ceiling about {ceiling:.2f} at K = {num_steps}",
                    {
                        "outside_share": outside,
                        "tokens": len(tokens),
                        "ceiling": ceiling,
                        "definition": "ceiling = sum_{k=0..K} coverage^k",
                    },
                    "Rebuild the draft vocabulary from the served traffic's tokens (a larger draft_vocab_size or the real data)."
                    if severity == "warn"
                    else "",
                )
            )
    return found


def context_findings(draft_config, target_config, context: int | None) -> list[Finding]:
    found = []
    limit = draft_config.max_position_embeddings
    target_limit = getattr(target_config, "max_position_embeddings", None)
    served = context or target_limit
    draft_scaling = rope_scaling(draft_config.llama_config)
    target_scaling = rope_scaling(target_config)
    evidence = {
        "draft_max_position_embeddings": limit,
        "target_max_position_embeddings": target_limit,
        "served_context": served,
        "draft_rope_scaling": draft_scaling,
        "target_rope_scaling": target_scaling,
    }
    if target_scaling and not draft_scaling and served and served > limit:
        found.append(
            Finding(
                "rope / context-window",
                "fail",
                f"the target scales RoPE ({target_scaling.get('rope_type', target_scaling.get('type'))}) for a context of {served} "
                f"but the draft's config has no rope_scaling and {limit} positions: past {limit} its positions mean something else",
                evidence,
                f"Copy the target's rope_scaling into the draft's config.json ({target_scaling}) if it was trained so, or cap the served context at {limit}.",
            )
        )
    elif served and served > limit:
        found.append(
            Finding(
                "rope / context-window",
                "warn",
                f"served context {served} exceeds the draft's max_position_embeddings {limit}: drafts degrade past their trained length (sglang#6783)",
                evidence,
                f"If the draft was trained on longer sequences, set max_position_embeddings: {served} in its config.json "
                f"(the accept-length curve of --context {served} shows whether it holds up); otherwise cap speculative "
                f"requests at {limit} tokens or train the draft on longer sequences.",
            )
        )
    return found


def precision_findings(target, target_config) -> list[Finding]:
    quant = getattr(target_config, "quantization_config", None)
    stored = str(getattr(target_config, "dtype", None) or "")
    if quant:
        method = quant.get("quant_method") if isinstance(quant, dict) else getattr(quant, "quant_method", "?")
        return [
            Finding(
                "precision",
                "warn",
                f"the target is quantized ({method}): its hidden states differ from the full-precision ones the draft was likely trained on",
                {"quantization": str(method), "replayed_in": str(target.dtype)},
                "Compare against a full-precision target (Decode with --dtype fp32) and train on the quantized target's features if they differ.",
            )
        ]
    return [
        Finding(
            "precision",
            "info",
            f"replayed in {str(target.dtype).replace('torch.', '')} on {target.device}; the checkpoint stores {stored or 'an unstated dtype'}",
            {"replayed_in": str(target.dtype), "stored": stored},
        )
    ]
