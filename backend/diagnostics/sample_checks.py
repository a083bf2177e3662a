"""The checks a diagnosis runs on samples: the wiring and reading probes' verdicts as findings, the
chat template, live replays (train-serve gap, repetition, a draft that accepts nothing) and the
accept-length-by-context curve."""

from __future__ import annotations

from dataclasses import dataclass, replace

from backend.diagnostics.findings import Finding
from backend.diagnostics.probe_report import describe
from backend.diagnostics.probe_settings import ProbeResult
from backend.drafts.reading_fixes import wiring_fix
from backend.engine.batch import replay_all
from backend.engine.replay import ReplayConfig, replay
from backend.engine.teacher import (
    TeacherCounts,
    draft_counts,
    draft_vocab_mask,
    target_pass,
    teacher_forced_counts,
)
from backend.run.metrics import acceptance_metrics, simulated_accept_length
from backend.run.records import PrefillRecord

REPEAT_NGRAM = 4
CONTEXT_DROP = 0.75  # an accept length below this share of the shortest context's is flagged
# Teacher-forced and live accept lengths both at most this: the draft predicts (almost) nothing,
# whatever else is wrong (a head re-initialised at random serves accept length ~1.0).
ACCEPTS_NOTHING = 1.05


def wiring_findings(report, num_layers: int, draft_dir: str | None = None) -> list[Finding]:
    """The probe's verdict as a finding: every tied wiring named (`ProbeReport.tied`, the one set every
    view uses); the fix writes a wiring only when the probe separated it, else says how to separate."""
    if report.confirmed:
        return []
    best, tied = report.best, report.tied
    names = " or ".join(f"HF {list(c.aux_hf_indices)}" for c in tied)
    message = (
        f"the draft was trained on {names}, not on the declared {describe(report.declared.aux_hf_indices, num_layers)}: "
        + (
            f"training loss {best.loss:.3f} vs {report.declared.loss:.3f} nats, "
            if best.loss is not None and report.declared.loss is not None
            else ""
        )
        + f"acc_0 {best.acc_step0:.3f} vs {report.declared.acc_step0:.3f}"
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
                "training_loss": {"declared": report.declared.loss, "best": best.loss},
                "n_positions": best.n_positions,
            },
            fix,
        )
    ]


@dataclass(frozen=True)
class ProbeAnswer:
    """What a wiring probe concluded, from one that ran in this verdict (`of_report`) or one kept
    with the pair (`of_stored`: the probe tab's, the CLI's, an earlier Diagnose's)."""

    confirmed: bool
    separated: bool
    best: list[int]
    tied: list[list[int]]
    declared: list[int]
    how_to_separate: str
    n_samples: int

    @classmethod
    def of_report(cls, report, draft_dir: str | None = None) -> ProbeAnswer:
        return cls(
            report.confirmed,
            report.separated,
            list(report.best.aux_hf_indices),
            [list(c.aux_hf_indices) for c in report.tied],
            list(report.declared.aux_hf_indices),
            "" if report.separated else report.how_to_separate(draft_dir),
            report.n_samples,
        )

    @classmethod
    def of_stored(cls, stored: ProbeResult) -> ProbeAnswer:
        best = list(stored.best.aux_hf_indices) if stored.best else []
        return cls(
            stored.confirmed,
            stored.separated,
            best,
            [list(t) for t in stored.tied or [best]],
            list(stored.declared.aux_hf_indices) if stored.declared else [],
            stored.how_to_separate or "",
            stored.n_samples or 0,
        )


def stored_probe_findings(stored: ProbeResult, num_layers: int) -> list[Finding]:
    """A wiring probe kept with the pair, as the verdict's finding when this verdict ran none (the
    cheap checks, which would otherwise say 'No cause found' while the stored probe rejects the
    declared wiring)."""
    answer = ProbeAnswer.of_stored(stored)
    if answer.confirmed or not answer.best:
        return []
    names = " or ".join(f"HF {t}" for t in answer.tied)
    fix = (
        f"Declare the trained wiring: eagle_config.eagle_aux_hidden_state_layer_ids = "
        f"{[i - 1 for i in answer.best]} (SGLang/SpecForge) and top-level eagle_aux_hidden_state_layer_ids = "
        f"{answer.best} (vLLM)."
        if answer.separated
        else answer.how_to_separate
    )
    return [
        Finding(
            "aux-wiring",
            "fail",
            f"the draft was trained on {names}, not on the declared {describe(answer.declared, num_layers)} "
            f"(the wiring probe {stored.ran_by or 'an earlier run'} ran on {answer.n_samples} samples, "
            "kept with this pair)",
            {
                "declared": answer.declared,
                "best": answer.best,
                "tied": answer.tied,
                "separated": answer.separated,
            },
            fix,
        )
    ]


def engine_wiring_against_probe(findings: list[Finding], answer: ProbeAnswer) -> list[Finding]:
    """The serving engines' wiring findings (cheap_checks.preflight_findings: what each engine feeds
    against the wiring the config declares) held against the wiring probe's answer (`ProbeAnswer`).
    When the probe rejects the declared wiring, no finding may write it into a fix: with one separated
    wiring, each engine finding states what it feeds against that one (and goes when the engine feeds
    it); with a tie, it says the trained wiring is unknown and how to separate."""
    if answer.confirmed:
        return findings
    best, tied = answer.best, answer.tied
    out = []
    for finding in findings:
        evidence = finding.evidence
        if finding.cls != "aux-wiring" or not {"engine", "fed", "trained"} <= set(evidence):
            out.append(finding)
            continue
        engine, fed, declared = evidence["engine"], evidence["fed"], evidence["trained"]
        if answer.separated and fed == best:
            continue  # this engine feeds what the probe found the draft trained on
        said = f"served by {engine}: it feeds HF {fed}; the wiring probe rejects the declared HF {declared}"
        if answer.separated:
            words, _ = wiring_fix(engine, best)
            out.append(
                replace(
                    finding,
                    message=f"{said} and found the draft trained on HF {best}",
                    evidence={**evidence, "trained": best, "declared": declared},
                    fix=f"In the draft's config.json: {words}",
                )
            )
        else:
            out.append(
                replace(
                    finding,
                    message=f"{said}; which wiring it was trained on is not known yet ({len(tied)} tie: "
                    + " / ".join(f"HF {t}" for t in tied)
                    + ")",
                    evidence={**evidence, "trained": None, "declared": declared, "tied": tied},
                    fix=answer.how_to_separate,
                )
            )
    return out


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
    config = ReplayConfig(num_steps, max_new_tokens, record=False, math=math)
    prompts = [list(sample.input_ids[: sample.prompt_len]) for sample in samples]
    for records in replay_all(target, draft, wiring, prompts, config):
        output: list[int] = []
        for record in records:
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


def predicted_accept_length(target, draft, wiring, math, samples, num_steps) -> float | None:
    """1 + the simulated accept length of teacher-forced accuracy on `samples` (the teacher's own sum)."""
    counts = TeacherCounts([0] * num_steps, [0] * num_steps)
    for sample in samples:
        counts.add(
            teacher_forced_counts(target, draft, wiring, sample.input_ids, sample.loss_mask, num_steps, math)
        )
    simulated = counts.simulated_accept_length
    return None if simulated is None else 1 + simulated
