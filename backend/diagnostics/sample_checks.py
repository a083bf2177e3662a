"""The checks a diagnosis runs on samples: the wiring and reading probes' verdicts as findings, the
chat template, live replays (train-serve gap, repetition, a draft that accepts nothing) and the
accept-length-by-context curve."""

from __future__ import annotations

from backend.diagnostics.findings import Finding
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
