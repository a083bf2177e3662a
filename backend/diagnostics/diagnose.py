"""Name the cause, not the symptom: one verdict over every failure class users report
(docs/reference.md §13).

`diagnose` runs the cheap checks first (preflight, the engines' readings, the serving-flag lint,
the vocabulary, the context window, the target's precision), then with samples the wiring probe, the
reading probe, the chat-template comparison, live replays (train-vs-serve gap, repetition) and, with
`context`, an accept-length-by-context curve. Each finding has a class from CLASSES (part of the CLI
contract), a severity (fail | warn | info), a message, its evidence and the fix. The verdict: broken
with any fail, suspect with any warn, ok otherwise; the headline is the worst finding's message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from backend.diagnostics.draft_head import head_findings, is_head_check, missing_head_fix
from backend.diagnostics.findings import SEVERITIES, Finding
from backend.diagnostics.penalty_check import penalty_findings
from backend.diagnostics.probe import ProbeSettings, describe, run_probe
from backend.diagnostics.reading_probe import rope_scaling, run_reading_probe
from backend.engine.metrics import acceptance_metrics, simulated_accept_length
from backend.engine.readings import SERVING_ENGINES, VARIANT_FLAGS, wiring_fix
from backend.engine.records import PrefillRecord, Progress, no_progress
from backend.engine.replay import ReplayConfig, replay
from backend.engine.teacher import (
    TeacherCounts,
    draft_counts,
    draft_vocab_mask,
    target_pass,
    teacher_forced_counts,
)
from backend.engine.wiring import Wiring

CLASSES = (
    "aux-wiring",
    "variant-flags",
    "vocab-mapping",
    "rope / context-window",
    "position-offset",
    "chat-template",
    "repetition",
    "serving-flags",
    "precision",
    "train-serve-gap",
    "no-acceptance",
    "synthetic-acceptance",
    "draft-head",
    "sampling-penalties",
    "structured-output",
    "lora",
    "prefix-cache",
    "disaggregation",
)
# preflight check name -> the class its failure belongs to
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
REPEAT_NGRAM = 4
CONTEXT_DROP = 0.75  # an accept length below this share of the shortest context's is flagged
# Teacher-forced and live accept lengths both at most this: the draft predicts (almost) nothing,
# whatever else is wrong (issue 42: a head re-initialised at random served at accept length ~1.0).
ACCEPTS_NOTHING = 1.05


@dataclass
class Diagnosis:
    findings: list[Finding]
    ran: dict  # check -> what it did ("ran", "skipped: why")
    measured: dict | None = None  # the live replays' accept length, with the wiring and reading it ran
    probe: dict | None = None  # the wiring probe's report and settings (the probe tab reuses it)

    @property
    def verdict(self) -> str:
        severities = {f.severity for f in self.findings}
        return "broken" if "fail" in severities else "suspect" if "warn" in severities else "ok"

    @property
    def headline(self) -> str:
        for severity in ("fail", "warn"):
            worst = sorted(  # a draft that accepts nothing is said first, whatever else is found
                (f for f in self.findings if f.severity == severity), key=lambda f: f.cls != "no-acceptance"
            )
            if worst:
                more = (
                    f" (+{len(worst) - 1} more {severity} finding{'s' * (len(worst) > 2)})"
                    if len(worst) > 1
                    else ""
                )
                return f"{worst[0].cls}: {worst[0].message}{more}"
        skipped = [k for k, v in self.ran.items() if str(v).startswith("skipped")]
        return "No cause found: every check that ran passed" + (
            f" (not run: {', '.join(skipped)})" if skipped else ""
        )

    def to_dict(self) -> dict:
        order = {s: i for i, s in enumerate(SEVERITIES)}
        findings = sorted(self.findings, key=lambda f: order[f.severity])
        return {
            "verdict": self.verdict,
            "headline": self.headline,
            "findings": [f.to_dict() for f in findings],
            "checks": self.ran,
            "measured": self.measured,
            "probe": self.probe,
            "classes": list(CLASSES),
        }


# ------------------------------------------------------------------------------ cheap checks


def preflight_findings(report: dict, engine: str) -> list[Finding]:
    """Failed checks by class; where the engines read the draft differently from its training reading:
    a fail for the serving engine under test, a warning for the others when none is named."""
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
    for fix in report.get("serving_fixes", []):  # readings.serving_wiring_findings: one per engine
        if serving and fix["engine"] != serving:
            continue
        found.append(
            Finding(
                "aux-wiring",
                "fail" if serving else "info",  # named: the engine under test; else what each would do
                f"served by {fix['engine']}: {fix['message']}",
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


# ------------------------------------------------------------------------------ with samples


def wiring_findings(report, num_layers: int, draft_dir: str | None = None) -> list[Finding]:
    """The probe's verdict as a finding: every tied wiring named (`ProbeReport.tied`, the one set every
    view uses); the fix writes a wiring only when the probe separated it, else says how to separate."""
    if report.confirmed:
        return []
    best, tied = report.best, report.tied
    names = " or ".join(f"HF {list(c.aux_hf_indices)}" for c in tied)
    message = (
        f"the draft was trained on {names}, not on the declared {describe(report.declared.aux_hf_indices, num_layers)}: "
        f"acc_0 {best.acc_step0:.3f} vs {report.declared.acc_step0:.3f}"
    )
    if len(tied) > 1:
        message += f" ({report.n_samples} samples cannot tell these {len(tied)} apart)"
    fix = (
        f"Declare the trained wiring: eagle_config.eagle_aux_hidden_state_layer_ids = "
        f"{[i - 1 for i in best.aux_hf_indices]} (SGLang/SpecForge) and top-level "
        f"eagle_aux_hidden_state_layer_ids = {list(best.aux_hf_indices)} (vLLM)."
        if report.separated
        else report.how_to_separate(draft_dir)
    )
    return [
        Finding(
            "aux-wiring",
            "fail",
            message,
            {
                "declared": list(report.declared.aux_hf_indices),
                "best": list(best.aux_hf_indices),
                "tied": [list(c.aux_hf_indices) for c in tied],
                "as_good_as_best": [list(c.aux_hf_indices) for c in tied[1:]],
                "separated": report.separated,
                "acc_step0": {"declared": report.declared.acc_step0, "best": best.acc_step0},
                "n_positions": best.n_positions,
            },
            fix,
        )
    ]


DIMENSION_CLASS = {
    "rope": "rope / context-window",
    "offset": "position-offset",
    "flag": "variant-flags",
    "feedback": "variant-flags",
}


def reading_findings(report) -> list[Finding]:
    better = report.better()
    if not better:
        return []
    found = []
    for dimension in ("rope", "offset", "flag", "feedback"):
        here = [c for c in better if c.dimension == dimension]
        if not here:
            continue
        best = here[0]
        tied = [c for c in report.ties(best) if c.dimension == dimension]
        names = " or ".join(c.label for c in [best, *tied][:3])
        found.append(
            Finding(
                DIMENSION_CLASS[dimension],
                "fail",
                f"the draft reads better with {names} than as declared: teacher-forced accuracy "
                f"{best.accuracy:.3f} vs {report.declared.accuracy:.3f} (separation needed {report.margin(best):.3f}: three paired standard errors)",
                {
                    "candidates": [c.to_dict() for c in [best, *tied]],
                    "declared": report.declared.to_dict(),
                    "engine": report.engine,
                },
                _candidate_fix(best, tied),
            )
        )
    return found


def _candidate_fix(best, tied) -> str:
    def one(candidate) -> str:
        if candidate.patch:
            return (
                "set "
                + ", ".join(f"{k}: {v}" for k, v in candidate.patch.items())
                + " in the draft's config.json"
            )
        if candidate.dimension == "offset":
            return (
                f"the draft was trained with its drafted positions {candidate.offset:+d} against the context: "
                "serve it with an engine (release) whose draft positions match training, or retrain"
            )
        return (
            "serve with the other feedback: set norm_output to the opposite value for this engine's reading"
        )

    text = one(best)
    if tied:
        text += "; or " + "; or ".join(one(c) for c in tied[:2]) + " (the samples cannot tell them apart)"
    return text[0].upper() + text[1:] + "."


def template_findings(
    target, draft, wiring, math, samples: list, num_steps: int, assumes: str = "the declared wiring"
) -> list[Finding]:
    """The samples' rendering against the served chat template, and acc both ways; every predicted
    number says the wiring and reading it assumes (`assumes`)."""
    tokenizer = target.tokenizer
    template = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    if not template or not samples:
        return []
    marker = "\u2063SPECLENS\u2063"
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": marker}], tokenize=False, add_generation_prompt=True
    )
    if marker not in rendered:
        return []
    prefix, suffix = rendered.split(marker, 1)
    texts = [tokenizer.decode(s.input_ids[: s.prompt_len]) for s in samples]
    templated = [
        t.startswith(prefix.strip()[:16]) or prefix.strip()[:16] in t[: len(prefix) + 8] for t in texts
    ]
    share = sum(templated) / len(templated)
    evidence = {"templated_share": share, "template_prefix": prefix[:80], "generation_suffix": suffix}
    # The same answers behind the other rendering: which one the draft predicts better.
    other = []
    for sample, text, is_templated in zip(samples[:8], texts, templated, strict=False):
        answer = sample.input_ids[sample.prompt_len :]
        if is_templated:
            content = (
                text[len(prefix) : len(text) - len(suffix)] if text.endswith(suffix) else text[len(prefix) :]
            )
            ids = tokenizer(content + "\n", add_special_tokens=False)["input_ids"]
        else:
            ids = list(
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": text}],
                    tokenize=True,
                    add_generation_prompt=True,
                    return_dict=True,
                )["input_ids"]
            )
        other.append((sample, ids + answer, [0] * len(ids) + sample.loss_mask[sample.prompt_len :]))
    if not other:
        return []
    in_vocab = draft_vocab_mask(draft, target.vocab_size, target.device)
    as_given, flipped = (
        TeacherCounts([0] * num_steps, [0] * num_steps),
        TeacherCounts([0] * num_steps, [0] * num_steps),
    )
    for sample, ids, mask in other:
        for counts, (input_ids, loss_mask) in (
            (as_given, (sample.input_ids, sample.loss_mask)),
            (flipped, (ids, mask)),
        ):
            passed = target_pass(target, input_ids, loss_mask, wiring.aux_hf_indices)
            counts.add(
                draft_counts(draft, passed, passed.features(wiring.aux_hf_indices), in_vocab, num_steps, math)
            )
    given_al = 1 + (simulated_accept_length(as_given.acc_per_step) if as_given.counted[0] else 0)
    flipped_al = 1 + (simulated_accept_length(flipped.acc_per_step) if flipped.counted[0] else 0)
    mostly_templated = share >= 0.5
    served_al, raw_al = (given_al, flipped_al) if mostly_templated else (flipped_al, given_al)
    evidence.update(
        {
            "predicted_accept_length_templated": served_al,
            "predicted_accept_length_raw": raw_al,
            "samples_compared": len(other),
            "definition": "1 + simulated accept length (teacher-forced, same answers)",
            "assumes": assumes,
        }
    )
    if raw_al > served_al + 0.15:
        return [
            Finding(
                "chat-template",
                "fail",
                f"the draft predicts the target far better behind raw prompts than behind the chat template "
                f"(predicted accept length {raw_al:.2f} raw vs {served_al:.2f} templated, assuming {assumes}): it was trained on raw "
                "prompts, and served requests carry the template",
                evidence,
                "Retrain on the target's answers rendered with its chat template (SpecForge's --chat-template), loss on the assistant tokens.",
            )
        ]
    if not mostly_templated:
        return [
            Finding(
                "chat-template",
                "info",
                f"{100 * (1 - share):.0f}% of these samples are raw prompts without the target's chat template; a chat server "
                f"sends the template (predicted accept length {raw_al:.2f} raw vs {served_al:.2f} templated, assuming {assumes}; no loss)",
                evidence,
            )
        ]
    return []


def live_findings(
    target, draft, wiring, math, samples: list, shape: tuple[int, int], predicted: float | None, assumes: str
) -> tuple[list[Finding], dict]:
    """Replays of the samples' prompts: the live accept length against the teacher's prediction
    (train-serve-gap) and the accept length on repeating spans against the rest (repetition)."""
    num_steps, max_new_tokens = shape  # K, and the tokens each replay generates
    counts, repeating, rest = [], [], []
    for sample in samples:
        prompt = list(sample.input_ids[: sample.prompt_len])
        output: list[int] = []
        config = ReplayConfig(num_steps, max_new_tokens, record=False, math=math)
        for record in replay(target, draft, prompt, wiring, config):
            if isinstance(record, PrefillRecord):
                output.append(record.first_token)
                continue
            emitted = list(record.drafted_ids[: record.accepted_count]) + [record.bonus_id]
            start = len(output)
            output.extend(emitted)
            repeated = sum(_repeats(output, start + i) for i in range(len(emitted)))
            (repeating if repeated * 2 > len(emitted) else rest).append(record.accepted_count)
            counts.append(record.accepted_count)
    metrics = acceptance_metrics(counts, num_steps) if counts else None
    live = metrics.mean_accept_length if metrics else None
    found = []
    evidence = {
        "live_accept_length": live,
        "predicted_accept_length": predicted,
        "verify_steps": len(counts),
        "samples": len(samples),
        "definition": "live: mean of a + 1 over verify steps; predicted: 1 + simulated accept length (teacher-forced)",
        "assumes": assumes,
    }
    if (
        live is not None
        and predicted is not None
        and live <= ACCEPTS_NOTHING
        and predicted <= ACCEPTS_NOTHING
    ):
        found.append(_accepts_nothing(draft, live, predicted, evidence))
    elif live is not None and predicted is not None and live < 0.8 * predicted and predicted - live > 0.3:
        found.append(
            Finding(
                "train-serve-gap",
                "warn",
                f"the live accept length {live:.2f} is well below the {predicted:.2f} teacher-forced accuracy predicts on the same samples ({assumes}): "
                "the served prompts are not the training distribution (the draft's own outputs drift from the samples' answers)",
                evidence,
                "Train on the target's own regenerated answers to prompts like the served ones.",
            )
        )
    if len(repeating) >= 3 and counts:
        share = len(repeating) / len(counts)
        rep_al = 1 + sum(repeating) / len(repeating)
        rest_al = 1 + sum(rest) / len(rest) if rest else None
        evidence_rep = {
            "repeating_steps": len(repeating),
            "other_steps": len(rest),
            "share": share,
            "accept_length_repeating": rep_al,
            "accept_length_rest": rest_al,
            "definition": f"a step repeats when most of its tokens complete a {REPEAT_NGRAM}-gram seen earlier in the output",
        }
        if share >= 0.3 and rest_al is not None and rep_al > rest_al + 0.5:
            found.append(
                Finding(
                    "repetition",
                    "warn",
                    f"{100 * share:.0f}% of verify steps sit in repeating spans, accepting {rep_al:.2f} against {rest_al:.2f} elsewhere: "
                    "the accept length is carried by output loops",
                    evidence_rep,
                    "Benchmark on prompts whose answers do not loop; report the accept length outside repeating spans.",
                )
            )
        else:
            found.append(
                Finding(
                    "repetition",
                    "info",
                    f"{100 * share:.0f}% of verify steps in repeating spans (accept length {rep_al:.2f} there)",
                    evidence_rep,
                )
            )
    return found, evidence


def _accepts_nothing(draft, live: float, predicted: float, evidence: dict) -> Finding:
    """The draft predicts nothing the target says, teacher-forced or live: broken whatever else is
    found. Its head's weight statistics are evidence (a random-init head has a small uniform spread)."""
    head = draft.lm_head.weight.detach().float()
    return Finding(
        "no-acceptance",
        "fail",
        f"the draft accepts almost nothing: live accept length {live:.2f}, teacher-forced {predicted:.2f} on "
        "the same samples. Its weights do not predict the target, whatever else is found",
        {
            **evidence,
            "lm_head_std": float(head.std()),
            "lm_head_mean_abs": float(head.abs().mean()),
            "threshold": ACCEPTS_NOTHING,
        },
        "Check the draft's head and weights first: an lm_head missing from the checkpoint or overwritten "
        "(the engine then starts it at random or from the target's, sglang#27908, vllm#27732), a "
        "checkpoint saved before training, or weights of another target. Re-export from the trained "
        "checkpoint.",
    )


def _repeats(output: list, position: int) -> bool:
    if position < REPEAT_NGRAM:
        return False
    gram = tuple(output[position - REPEAT_NGRAM + 1 : position + 1])
    earlier = output[:position]
    return any(tuple(earlier[i : i + REPEAT_NGRAM]) == gram for i in range(len(earlier) - REPEAT_NGRAM + 1))


def context_curve(
    target, draft, wiring, math, samples: list, context: int, num_steps: int
) -> tuple[list[Finding], list[dict]]:
    """The same prompt behind growing filler (the samples' own tokens): accept length per length."""
    filler = [t for s in samples for t in s.input_ids]
    if not filler:
        return [], []
    prompt = list(samples[0].input_ids[: samples[0].prompt_len])
    lengths, length = [], 256
    while length < context:
        lengths.append(length)
        length *= 2
    lengths.append(context)
    curve = []
    for total in lengths:
        pad = max(0, total - len(prompt))
        repeated = (filler * (pad // max(1, len(filler)) + 1))[:pad]
        counts = [
            r.accepted_count
            for r in replay(
                target, draft, repeated + prompt, wiring, ReplayConfig(num_steps, 32, record=False, math=math)
            )
            if not isinstance(r, PrefillRecord)
        ]
        metrics = acceptance_metrics(counts, num_steps) if counts else None
        curve.append(
            {
                "prompt_tokens": len(repeated) + len(prompt),
                "accept_length": metrics.mean_accept_length if metrics else None,
            }
        )
    base = curve[0]["accept_length"]
    fallen = [
        p
        for p in curve[1:]
        if base and p["accept_length"] is not None and p["accept_length"] < CONTEXT_DROP * base
    ]
    if not fallen:
        return [], curve
    return [
        Finding(
            "rope / context-window",
            "fail",
            f"the accept length falls from {base:.2f} at {curve[0]['prompt_tokens']} tokens to {fallen[0]['accept_length']:.2f} at "
            f"{fallen[0]['prompt_tokens']}: the draft does not hold up at the served context",
            {"curve": curve, "draft_max_position_embeddings": draft.config.max_position_embeddings},
            f"Cap speculative requests below {fallen[0]['prompt_tokens']} tokens, give the draft the target's rope_scaling, or train it on longer sequences.",
        )
    ], curve


def _predicted(target, draft, wiring, math, samples, num_steps) -> float | None:
    """1 + the simulated accept length of teacher-forced accuracy on `samples` (the teacher's own sum)."""
    counts = TeacherCounts([0] * num_steps, [0] * num_steps)
    for sample in samples:
        counts.add(
            teacher_forced_counts(target, draft, wiring, sample.input_ids, sample.loss_mask, num_steps, math)
        )
    simulated = counts.simulated_accept_length
    return None if simulated is None else 1 + simulated


@dataclass(frozen=True)
class DiagnoseOptions:
    """How a diagnosis runs (the CLI's flags): the serving command whose flags are linted and whose
    engine's reading is tested, the served context to test, K, the live replays, the probe's budget,
    and where the models load."""

    sglang: str | None = None
    vllm: str | None = None
    context: int | None = None
    engine: str = "auto"  # the reading under test (auto: as declared)
    request_file: str | None = None  # request bodies as sent: penalties, grammar, adapters
    num_steps: int = 4
    live_samples: int = 2
    live_tokens: int = 64
    probe_budget: int = 20
    device: str | None = None
    dtype: str | None = None


@dataclass
class Subject:
    """The loaded pair under diagnosis and the engine reading (`readings.EngineView`) it runs under."""

    target: object  # backend.engine.loading.Target
    draft: object  # backend.engine.draft_model.Eagle3Draft
    draft_dir: str
    view: object


# Lint codes with a class of their own (the rest are serving-flags).
LINT_CLASSES = {
    "synthetic-acceptance": "synthetic-acceptance",
    "k-varies-with-load": "synthetic-acceptance",
    **{c: c for c in ("sampling-penalties", "structured-output", "lora", "prefix-cache", "disaggregation")},
}


def lint_as_findings(lint_findings: list[dict]) -> list[Finding]:
    """The serving-flag lint's findings in the diagnosis's classes and severities."""
    return [
        Finding(
            LINT_CLASSES.get(finding["code"], "serving-flags"),
            {"error": "fail", "warning": "warn"}.get(finding["severity"], "info"),
            finding["message"]
            if LINT_CLASSES.get(finding["code"]) == finding["code"]  # its class names it already
            else f"{finding['code']}: {finding['message']}",
            {"code": finding["code"], "engine": finding.get("engine")},
            finding.get("fix", ""),
        )
        for finding in lint_findings
    ]


def diagnose_loaded(
    subject: Subject,
    preflight_report: dict,
    samples: list,
    lint_findings: list[dict] | None = None,
    options: DiagnoseOptions | None = None,
    progress: Progress = no_progress,
    penalties: dict | None = None,
) -> Diagnosis:
    """Every check on a loaded pair under its view (`options.engine`'s reading); `penalties`: the
    sampling penalties served (request-style names), measured on live replays."""
    options = options or DiagnoseOptions()
    target, draft, num_steps = subject.target, subject.draft, options.num_steps
    ran: dict = {}
    findings = preflight_findings(preflight_report, options.engine)
    ran["preflight"] = "ran"
    findings += lint_as_findings(lint_findings or [])
    ran["serving flags"] = "ran" if lint_findings is not None else "skipped: no --sglang, --vllm or --request"
    findings += vocab_findings(draft, target.vocab_size, samples, num_steps)
    findings += context_findings(draft.config, target.model.config, options.context)
    findings += precision_findings(target, target.model.config)
    findings += head_findings(draft, target)
    ran["draft head"] = "ran"
    if not samples:
        for check in ("wiring probe", "reading probe", "chat template", "live replays", "penalties"):
            ran[check] = "skipped: no --samples"
        return Diagnosis(findings, ran)
    measured: dict = {}
    findings += _sample_findings(subject, samples, options, ran, progress, penalties or {}, measured)
    progress(1.0, "done")
    probe = measured.pop("probe", None)
    return Diagnosis(findings, ran, measured or None, probe)


def _sample_findings(
    subject: Subject,
    samples: list,
    options: DiagnoseOptions,
    ran: dict,
    progress: Progress,
    penalties: dict,
    measured: dict,
) -> list[Finding]:
    """The checks that need samples, in order (each may use the wiring an earlier one found); what
    each ran on goes into `ran`."""
    target, draft, num_steps = subject.target, subject.draft, options.num_steps
    wiring, math = subject.view.wiring, subject.view.math
    findings: list[Finding] = []
    progress(0.05, "wiring probe")
    settings = ProbeSettings(num_steps, options.probe_budget)
    probe = run_probe(
        target,
        draft,
        wiring,
        samples,
        settings,
        math=math,
        progress=lambda f, m: progress(0.05 + 0.3 * f, f"wiring probe: {m}"),
    )
    measured["probe"] = {
        **probe.to_dict(),
        "settings": settings.describe(samples),
        "ran_by": f"Diagnose (read as {subject.view.engine})",
    }
    ran["wiring probe"] = f"ran on {len(samples)} samples"
    findings += wiring_findings(probe, target.num_layers, subject.draft_dir)
    if not probe.confirmed:
        wiring = Wiring(tuple(probe.best.aux_hf_indices), "the wiring probe's best")
    assumes = (
        f"HF {list(wiring.aux_hf_indices)}, "
        + ("the wiring probe's best, not the declared one" if not probe.confirmed else "the declared wiring")
        + f", read as {subject.view.engine}"
    )
    progress(0.35, "reading probe")
    readings = run_reading_probe(
        target,
        subject.draft_dir,
        wiring,
        samples,
        options.engine,
        num_steps,
        lambda f, m: progress(0.35 + 0.3 * f, m),
    )
    ran["reading probe"] = f"ran on {readings.n_samples} samples, {len(readings.candidates)} readings"
    findings += reading_findings(readings)
    progress(0.65, "chat template")
    findings += template_findings(target, draft, wiring, math, samples, num_steps, assumes)
    ran["chat template"] = (
        "ran"
        if target.tokenizer is not None and getattr(target.tokenizer, "chat_template", None)
        else "skipped: the target has no chat template"
    )
    progress(0.75, "live replays")
    live_samples = samples[: options.live_samples]
    predicted = _predicted(target, draft, wiring, math, live_samples, num_steps)
    live, evidence = live_findings(
        target, draft, wiring, math, live_samples, (num_steps, options.live_tokens), predicted, assumes
    )
    findings += live
    if evidence["live_accept_length"] is not None:
        measured.update(
            {
                "live_accept_length": evidence["live_accept_length"],
                "predicted_accept_length": evidence["predicted_accept_length"],
                "samples": len(live_samples),
                "verify_steps": evidence["verify_steps"],
                "max_new_tokens": options.live_tokens,
                "assumes": assumes,
                "definition": evidence["definition"],
            }
        )
    ran["live replays"] = f"ran on {len(live_samples)} samples"
    if penalties:
        progress(0.85, "penalties")
    found, ran["penalties"] = penalty_findings(
        target, draft, wiring, math, live_samples, num_steps, options.live_tokens, penalties
    )
    findings += found
    if options.context:
        progress(0.9, "context curve")
        found, curve = context_curve(target, draft, wiring, math, samples, options.context, num_steps)
        findings += found
        ran["context curve"] = f"ran at {[p['prompt_tokens'] for p in curve]} tokens"
    else:
        ran["context curve"] = "skipped: no --context"
    return findings
