"""Commands that load the target and the draft: replay, teacher, probe, diagnose, evaluate (preflight, which
reads the files only, is preflight.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from backend import BadInput
from backend.cli.flags import request_fields
from backend.cli.render import fmt, percent_bar, progress_bar
from backend.defaults import default_draft
from backend.drafts.dflash_config import DFLASH


def load_pair(args, sample_length: int):
    """(target, draft, wiring) for teacher/probe: the draft is refused with the preflight's reasons
    when it fails; its warnings go to stderr."""
    from backend.drafts.readings import reading_of
    from backend.service import models
    from backend.service.checkpoints import checked_override
    from backend.service.plan import preflight_warnings

    override = checked_override(args.target, args.aux_hf_indices)  # before the weights load
    target, draft, report = models.pair(args.target, args.draft, args.device, args.dtype)
    view, wiring = reading_of(args.engine, override, draft, target.num_layers)
    for warning in preflight_warnings(report, draft, sample_length) + list(view.notes):
        print(f"warning: {warning}", file=sys.stderr)
    return target, draft, wiring, view


def cmd_replay(args) -> tuple[dict, str]:
    from backend.data.samples import sample_at
    from backend.run.request import ReplayRequest
    from backend.service.jobs import run_replay
    from backend.service.replay_answer import replay_answer

    if args.index is not None and not args.samples:
        raise BadInput("--index picks a sample of --samples: give --samples FILE, or drop --index")
    vocab_size = checked_vocab(args)
    if args.samples:
        index = args.index or 0
        sample = sample_at(args.samples, index, vocab_size)
        source = {"prompt_ids": tuple(sample.prompt_ids), "sample_ref": f"{args.samples}#{index}"}
    else:
        source = {"prompt_text": args.prompt, "sample_ref": "prompt", "chat_template": args.chat_template}
    request = ReplayRequest(
        args.target,
        args.draft,
        record=not args.no_record,
        **request_fields(args),
        **source,
    )
    bar = progress_bar(args.max_new_tokens, "replay")
    try:
        outcome = run_replay(
            request,
            args.db,
            lambda fraction, _message: bar.update(round(fraction * args.max_new_tokens) - bar.n),
        )
    finally:
        bar.close()
    for warning in outcome.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    metrics, wiring, resolved = outcome.metrics, outcome.wiring, outcome.resolved
    result = replay_answer(request, outcome).to_dict()
    text = (
        f"run {outcome.run_id}: {len(outcome.output_ids)} tokens in {len(outcome.steps)} verify steps, "
        f"accept length {fmt(metrics.mean_accept_length)} (mean of a+1, bonus included), "
        f"K={args.steps}, {resolved.mode}, aux HF indices {list(wiring.aux_hf_indices)} "
        f"({wiring.source})"
    )
    if metrics.expected_accept_length is not None and resolved.sampling_rule:
        text += f"; expected accept length {fmt(metrics.expected_accept_length)}"
    if outcome.output_text is not None:
        text += "\n" + outcome.output_text
    return result, text


def cmd_teacher(args) -> tuple[dict, str]:
    from backend.engine.teacher import TeacherCounts, teacher_forced_counts

    samples, rejected = load_samples(args.samples, checked_vocab(args), args.limit)
    target, draft, wiring, view = load_pair(args, max(len(s.input_ids) for s in samples))
    if getattr(draft.config, "method", None) == DFLASH:
        return dflash_teacher(args, target, draft, wiring, samples)
    totals = TeacherCounts([0] * args.steps, [0] * args.steps)
    bar = progress_bar(len(samples), "teacher")
    bar.unit = "sample"
    for sample in samples:
        totals.add(
            teacher_forced_counts(
                target, draft, wiring, sample.input_ids, sample.loss_mask, args.steps, view.math
            )
        )
        bar.update(1)
    bar.close()
    result = {
        "acc_per_step": totals.acc_per_step,
        "simulated_accept_length": totals.simulated_accept_length,
        "n_positions": totals.counted[0],
        "n_samples": len(samples),
        "aux_hf_indices": list(wiring.aux_hf_indices),
        "wiring_source": wiring.source,
        "engine": view.engine,
        "rejected": [{"line": r.line, "reason": r.reason} for r in rejected],
    }
    text = (
        f"{len(samples)} samples, {totals.counted[0]} loss-masked positions; acc_k = "
        + ", ".join(fmt(a) for a in totals.acc_per_step)
        + f"; simulated accept length {fmt(totals.simulated_accept_length)} (sum_k prod_j<=k acc_j, no bonus)"
    )
    return result, text


def dflash_teacher(args, target, draft, wiring, samples) -> tuple[dict, str]:
    """A DFlash draft's teacher-forced blocks (backend/diagnostics/dflash_teacher.py)."""
    from backend.diagnostics.dflash_teacher import slot_accuracy

    bar, progress = percent_bar("teacher")
    try:
        found = slot_accuracy(target, draft, wiring, samples, args.steps, progress)
    finally:
        bar.close()
    result = found.to_dict() | {"n_samples": len(samples), "aux_hf_indices": list(wiring.aux_hf_indices)}
    text = (
        f"{len(samples)} samples, {found.n_anchors} anchors (K = {args.steps}, a block of {args.steps + 1}); slot "
        "accuracy = "
        + ", ".join(fmt(a) for a in found.slot_accuracy)
        + "; all slots 1..k right = "
        + ", ".join(fmt(a) for a in found.prefix_rates)
        + f"; accept length at every anchor {fmt(found.predicted_accept_length)} (1 + mean leading run of right "
        "slots; where the sample is the target's own continuation, a replay step starting at an anchor accepts "
        "exactly that run, and a replay's mean is over the anchors its steps reach)"
    )
    return result, text


def checked_vocab(args) -> int:
    """The target's vocab size from its config, after both configs are checked: a bad target,
    draft or flag is reported before any weights load (seconds, and progress bars, later). A wiring
    override's range is checked where it is used, also before any load (checkpoints.checked_override)."""
    from backend.drafts.draft_config import read_draft_config
    from backend.engine.loading import pick_device, read_target_config

    config = read_target_config(args.target)
    if isinstance(getattr(args, "draft", None), str):
        read_draft_config(args.draft).check_buildable()
    pick_device(getattr(args, "device", None))
    return config.vocab_size


def load_samples(path: str, vocab_size: int, limit: int | None):
    from backend.data.samples import read_jsonl

    samples, rejected = read_jsonl(path, vocab_size)
    if not samples:
        raise BadInput(
            f"{path}: no valid sample"
            + (f" (line {rejected[0].line}: {rejected[0].reason})" if rejected else "")
        )
    return (samples[:limit] if limit else samples), rejected


def cmd_diagnose(args) -> tuple[dict, str]:
    from backend.diagnostics.diagnose import DiagnoseOptions
    from backend.service.database import existing_store
    from backend.service.diagnosis import diagnose, serving_engine

    serving_engine(args.engine, args.sglang, args.vllm)  # contradictions before anything loads
    if args.report:
        from backend.service.diagnosis_report import check_report_path

        check_report_path(args.report)
    store_first(args)
    if args.request:
        from backend.diagnostics.serving_features import read_request_bodies

        read_request_bodies(args.request)  # a bad request file before anything loads
    vocab = checked_vocab(args)
    samples = load_samples(args.samples, vocab, args.limit)[0] if args.samples else []
    bar, progress = percent_bar("diagnose")

    try:
        options = DiagnoseOptions(
            sglang=args.sglang,
            vllm=args.vllm,
            context=args.context,
            engine=args.engine,
            request_file=args.request,
            features=args.features,
            served=args.served,
            num_steps=args.steps,
            live_samples=args.live,
            device=args.device,
            dtype=args.dtype,
        )
        result = diagnose(args.target, args.draft, samples, options, progress, existing_store(args.db))
    finally:
        bar.close()
    if result.probe:
        keep_probe(args, result.probe)
    lines = [f"verdict: {result.verdict.upper()}: {result.headline}"]
    for finding in result.findings:
        lines.append(f"  {finding.severity.upper():4} {finding.cls}: {finding.message}")
        if finding.fix:
            lines.append(f"       fix: {finding.fix}")
    lines += [f"  ({check}: {what})" for check, what in result.checks.items()]
    if result.next_step:
        lines.append(f"next: {result.next_step}")
    if args.report:
        from backend.service.database import existing_store
        from backend.service.diagnosis_report import diagnosis_report, write_report

        written = write_report(diagnosis_report(result, existing_store(args.db)), args.report)
        lines.append(f"report: {written}")
    return result.to_dict(), "\n".join(lines)


def store_first(args) -> None:
    """A --db given to keep what the command finds is opened before anything loads: a file that is not a
    database is refused in one line then, not after minutes of work kept nowhere."""
    if getattr(args, "db", None):
        from backend.service.database import database_url, open_database

        open_database(database_url(args.db))


def keep_probe(args, report) -> None:
    """A probe the CLI ran (alone or inside diagnose) is kept with the pair, as the pages keep theirs:
    the lint, the probe tab and Decode's reference then use it (the largest probe of the draft as it
    is now wins, service/kept_results.py known_probe)."""
    from backend.service.database import database_url
    from backend.service.kept_results import remember_probe

    remember_probe(args.target, args.draft, report, database_url(args.db))


def cmd_probe(args) -> tuple[dict, str]:
    from backend.diagnostics.probe import ProbeSettings, run_probe

    store_first(args)
    samples, _ = load_samples(args.samples, checked_vocab(args), args.limit)
    target, draft, wiring, view = load_pair(args, max(len(s.input_ids) for s in samples))
    if getattr(draft.config, "method", None) == DFLASH:
        return dflash_probe(args, target, draft, samples)
    if args.write_fix:
        raise BadInput(
            "probe --write-fix writes a DFlash draft's layers; for EAGLE-3 use preflight --write-fix DIR --engine ENGINE"
        )
    bar, progress = percent_bar("probe")

    try:
        settings = ProbeSettings(args.steps, args.budget, args.live, args.live_tokens, args.via)
        report = run_probe(
            target, draft, wiring, samples, settings, progress, view.math, ran_by="the CLI's probe"
        )
    finally:
        bar.close()
    keep_probe(args, report)
    live = args.live and any(c.live_accept_length is not None for c in report.candidates)
    lines = [f"{'HF indices':>14}   loss  acc_0  pred. AL" + ("  live AL" if live else "") + "  label"]
    for c in report.candidates[: 12 if args.via == "step" else len(report.candidates)]:
        predicted = "  n/a " if c.predicted_accept_length is None else f"{c.predicted_accept_length:6.2f}"
        loss = "  n/a" if c.loss is None else f"{c.loss:6.3f}"
        measured = (
            ""
            if not live
            else "     n/a"
            if c.live_accept_length is None
            else f"   {c.live_accept_length:6.3f}"
        )
        lines.append(
            f"{str(list(c.aux_hf_indices)):>14} {loss}  {c.acc_step0:.3f}  {predicted}{measured}    {c.label}"
        )
    by_trace = live and args.via == "trace"
    lines.append(
        "loss: the draft's training loss (nats) at TTT step 0"
        + (", which ranks" if not by_trace else "")
        + "; acc_0: top-1 accuracy there"
        + (
            f"; live AL: accept length of greedy replays of the first {args.live} samples, {args.live_tokens} "
            + ("tokens, over traces (exact: the step replay's counts), which ranks" if by_trace else "tokens")
            if live
            else ""
        )
    )
    lines.append(f"({len(report.candidates)} candidates, {report.n_samples} samples, {report.seconds:.1f} s)")
    lines.append(report.verdict)
    return report.to_dict(), "\n".join(lines)


def dflash_probe(args, target, draft, samples) -> tuple[dict, str]:
    """The DFlash layer probe (backend/diagnostics/dflash_probe.py): the declared target layers and
    their shifts, by the draft's training loss."""
    from backend.diagnostics.dflash_probe import probe_layers

    bar, progress = percent_bar("probe")
    try:
        result = probe_layers(target, draft, samples, progress=progress)
    finally:
        bar.close()
    lines = [f"{'target_layer_ids (z-lab)':>26}   loss  slot acc  label"]
    for c in result.candidates:
        loss = "  n/a" if c.loss is None else f"{c.loss:6.3f}"
        accuracy = "  n/a" if c.slot_accuracy is None else f"{c.slot_accuracy:.3f}"
        lines.append(f"{str(c.target_layer_ids):>26} {loss}     {accuracy}  {c.label}")
    lines.append(
        f"loss: the DFlash training loss (nats, position-decayed, the first {result.anchors} anchors of each of "
        f"{result.n_samples} samples), which ranks; slot acc: top-1 over the block slots it counts"
    )
    lines.append(result.verdict)
    answer = result.to_dict()
    if args.write_fix:
        from backend.service.draft_fix import write_fixed_draft

        if result.fix is None:
            answer["fixed_draft"] = {
                "path": None,
                "said": "no fix to write: the declared layers are not separated",
            }
        else:
            path = write_fixed_draft(args.draft, args.write_fix, result.fix)
            answer["fixed_draft"] = {"path": str(path), "config_update": result.fix, "said": f"wrote {path}"}
        lines.append(answer["fixed_draft"]["said"])
    return answer, "\n".join(lines)


def cmd_evaluate(args) -> tuple[dict, str]:

    from backend.data.importer import check_source, read_dataset

    check_source(args.samples)  # a bad path is refused before the model stack is imported
    from backend.engine.loading import read_target_config
    from backend.run.request import ReplayRequest
    from backend.service import evaluate
    from backend.service.eval_pairs import Plan

    drafts = args.draft or [default_draft()]
    tokenizer = None
    if args.format in (None, "sharegpt", "prompts"):
        from backend.engine.loading import load_tokenizer

        tokenizer = load_tokenizer(args.target)  # None when it has none or it cannot be read
    vocab = read_target_config(args.target).vocab_size
    dataset = read_dataset(args.samples, tokenizer, vocab, args.format)
    samples = [s for s in dataset.samples if not args.source or args.source in (s.source or "")]
    for index, sample in enumerate(dataset.samples):
        sample.index = index  # the position in the file's valid samples, as replay --index counts
    samples = samples[: args.limit] if args.limit else samples
    if not samples:
        why = (
            f"; {len(dataset.rejected)} rejected, the first: line {dataset.rejected[0].line}: {dataset.rejected[0].reason}"
            if dataset.rejected
            else ""
        )
        raise BadInput(f"{args.samples}: no sample to evaluate (after --source / --limit){why}")
    template = ReplayRequest(  # a bad setting is refused here, before any model loads
        args.target, drafts[0], prompt_ids=tuple(samples[0].prompt_ids), **request_fields(args)
    )
    plan = Plan(template, drafts, samples, str(args.samples), {d: Path(d).name or d for d in drafts})
    # in percent: a batch moves by tokens, not by whole runs, so a count of runs would read "4/4" while
    # the message beside it says 2 of the 4 samples are done
    bar, report = percent_bar(f"evaluate {len(drafts) * len(samples)} runs")
    try:
        where = evaluate.Where(args.ray, args.workers, args.ray_timeout, args.batch)
        result = evaluate.evaluate(args.db, plan, not args.no_resume, report, where)
    finally:
        bar.close()
    text = (
        f"{len(samples)} samples x {len(drafts)} drafts: {result['replayed']} replayed, {result['reused']} "
        f"already stored\n" + evaluate.table(result)
    )
    return result, text
