"""Commands about a server: the flag lint, what it reported (observe), and checks against it (serve-check)."""

from __future__ import annotations

from pathlib import Path

from backend import BadInput
from backend.cli.pair import checked_vocab, load_samples
from backend.cli.render import ci_text, fmt, percent_bar
from backend.defaults import default_draft, default_target


def cmd_lint(args) -> tuple[dict, str]:
    from backend.service.database import existing_store
    from backend.service.serving_lint import lint

    if args.llamacpp is not None and args.request:
        raise BadInput("lint --llamacpp reads no --request (llama-server's request fields are not linted)")
    engine, command = next(
        (name, given)
        for name, given in (("llamacpp", args.llamacpp), ("sglang", args.sglang), ("vllm", args.vllm))
        if given is not None
    )
    if engine == "llamacpp":  # a llama-server command names GGUFs: the HF pair defaults as elsewhere
        args.target, args.draft = args.target or default_target(), args.draft or default_draft()
    report = lint(args.draft, command, engine, args.target, existing_store(args.db), args.request)
    lines = [f"{f.severity.upper():7} {f.code}: {f.message}\n        fix: {f.fix}" for f in report.findings]
    if report.effective_flags:
        lines.append(f"{report.engine} will run: {report.effective_flags}")
    if report.recommended_command:
        lines.append(f"recommended command ({', '.join(report.recommended_applies)} applied):")
        lines.append(f"  {report.recommended_command}")
        if report.recommended_leaves:
            lines.append(f"  still to fix outside the command: {', '.join(report.recommended_leaves)}")
    lines.append(f"{len(report.findings)} findings, {report.errors} errors")
    return report.to_dict(), "\n".join(line for line in lines if line)


def cmd_observe(args) -> tuple[dict, str]:
    from backend.service.checkpoints import problem
    from backend.service.observations import observe

    for path, role in ((args.draft, "draft"), (args.target, "target")):  # given, it must be one
        said = path and problem(path, role)
        if said:
            raise BadInput(f"--{role} {said}")
    if args.runs and not args.export_profile:
        raise BadInput("--runs goes with --export-profile OUT")
    if args.replay_worst and not args.requests:
        raise BadInput("--replay-worst goes with --requests FILE")
    if args.requests or args.export_profile:
        return cmd_observe_requests(args)

    engine, sources = ("sglang", [args.sglang_log]) if args.sglang_log else ("vllm", args.vllm_metrics)
    result = observe(args.db, engine, sources, args.draft, args.target, args.num_speculative_tokens)
    lines = [
        f"observation {result.observation_id}: {engine} accept length {fmt(result.accept_length)} "
        f"({result.definition})"
    ]
    if result.per_position:
        lines.append("per-position acceptance: " + ", ".join(f"{p:.3f}" for p in result.per_position))
    if result.settings:
        lines.append(
            "settings the server ran with: " + ", ".join(f"{k}={v}" for k, v in result.settings.items())
        )
    lines += [f"{f.severity.upper():7} {f.code}: {f.message}" for f in result.lint]
    lines.append(
        f"offline replay of this draft at K={result.num_steps}: {fmt(result.replay.accept_length)} "
        f"({result.replay.runs} runs)"
    )
    lines.append(result.verdict)
    return result.to_dict(), "\n".join(lines)


def cmd_serve_check(args) -> tuple[dict, str]:
    from backend.service.observations import ServeCheckSettings, check_server_url, serve_check

    if args.features or args.responses:
        return cmd_feature_check(args)
    if not args.samples:
        raise BadInput("serve-check: --samples FILE is needed (their prompts are sent)")
    from backend.service.served_engines import engine_for, served_readings

    served = args.engine in served_readings()
    if (args.url is None) == (not args.launch) or (args.launch and not served):
        raise BadInput(
            f"serve-check: give --url URL, or --launch with --engine {' or '.join(served_readings())} "
            "(SpecLens starts that engine on the pair)"
        )
    options = server_options(args)
    given = [flag for name, flag in ENGINE_FLAGS.items() if getattr(options, name) not in (None, ())]
    if given and not served:
        raise BadInput(f"serve-check: {', '.join(given)} go with --engine {' / '.join(served_readings())}")
    if served:
        engine_for(args.engine).check_options(options, ENGINE_FLAGS)
    if args.target_gguf and not args.launch:
        raise BadInput(
            "serve-check: --target-gguf goes with --launch (SpecLens serves it beside the F32 target)"
        )
    if args.url is not None:
        check_server_url(args.url)  # before the target loads
    if served:
        return cmd_engine_check(args)
    samples, _ = load_samples(args.samples, checked_vocab(args), args.limit)
    settings = ServeCheckSettings(check_request(args, samples), timeout=args.timeout)
    result = serve_check(args.db, args.url, samples, settings)
    lines = [f"{'sample':>6} {'server AL':>9} {'replay AL':>9}"]
    lines += [
        f"{r['sample']:>6} {fmt(r['server_accept_length']):>9} {fmt(r['replay_accept_length']):>9}"
        for r in result["rows"]
    ]
    lines.append(
        f"{'mean':>6} {fmt(result['server_mean_accept_length']):>9} {fmt(result['replay_mean_accept_length']):>9}"
    )
    lines.append(result["verdict"])
    return result, "\n".join(lines)


def cmd_feature_check(args) -> tuple[dict, str]:
    """serve-check --features (--responses FILE | --url URL): the served features, slot by slot."""
    from backend.service import feature_check as check
    from backend.service.observations import check_server_url

    if not args.features:
        raise BadInput("serve-check: --responses is read with --features")
    if (args.url is None) == (args.responses is None) or args.launch:
        raise BadInput(
            "serve-check --features: give --responses FILE (saved responses) or --url URL (SGLang)"
        )
    if args.engine not in ("auto", "sglang"):
        raise BadInput("serve-check --features reads SGLang's meta_info.hidden_states: use --engine sglang")
    if args.url is not None:
        check_server_url(args.url)
    responses = check.read_responses(args.responses) if args.responses else None
    prompts = None
    if args.samples:
        prompts = [list(s.prompt_ids) for s in load_samples(args.samples, checked_vocab(args), args.limit)[0]]
    if responses is None:
        if not prompts:
            raise BadInput("serve-check --features --url: --samples FILE is needed (their prompts are sent)")
        responses = [check.request_features(args.url, p, args.max_new_tokens, args.timeout) for p in prompts]
    result = check.feature_check(
        args.target or default_target(), args.draft, responses, prompts, args.responses or args.url
    )
    lines = [f"{'slot':>4} {'fed HF':>6} {'cosine':>7} {'norm ratio':>10}  runner-up"]
    for slot in result.slots:
        other = slot.runner_up
        lines.append(
            f"{slot.slot:>4} {'-' if slot.best is None else slot.best:>6} {slot.cosine:>7.4f} "
            f"{slot.norm_ratio:>10.3f}  " + (f"HF {other.hf_index} ({other.cosine:.4f})" if other else "")
        )
    lines.append(f"trained on HF {result.trained_hf}; SGLang reads the config as HF {result.sglang_reads_hf}")
    lines += [f"response {r.response}: {r.layout}, {r.rows_compared} rows" for r in result.requests]
    if result.note:
        lines.append(result.note)
    lines.append(("ok: " if result.fed_as_trained else "MISMATCH: ") + result.verdict)
    return result.to_dict(), "\n".join(lines)


def check_request(args, samples):
    """The replay serve-check holds a server against, from the command's own request flags (the first
    sample's prompt stands for each sample's)."""
    from backend.cli.flags import request_fields
    from backend.run.request import ReplayRequest

    if not samples:
        raise BadInput(f"{args.samples}: no sample to send")
    fields = request_fields(args)  # its --url and --launch are the engine's, not a trace source's
    fields.pop("trace_url", None)
    fields.pop("trace_launch", None)
    if args.via == "trace":
        from_vllm = fields.get("engine") == "vllm"
        fields |= {
            "via": "trace",
            "trace_from": "vllm" if from_vllm else "local",
            "trace_url": args.trace_url if from_vllm else None,
            "trace_launch": from_vllm and not args.trace_url,
        }
    return ReplayRequest(args.target, args.draft, prompt_ids=tuple(samples[0].prompt_ids), **fields)


# the engine options serve-check refuses for an engine that does not read them, with their flags
ENGINE_FLAGS = {"server_log": "--server-log", "server_args": "--server-arg", "target_gguf": "--target-gguf"}


def server_options(args):
    from backend.service.served_engines import ServerOptions

    return ServerOptions(
        vllm_python=args.vllm_python,
        llamacpp=args.llamacpp,
        threads=args.threads,
        server_args=tuple(args.server_arg),
        target_gguf=args.target_gguf,
        server_log=args.server_log,
    )


def cmd_engine_check(args) -> tuple[dict, str]:
    """serve-check against an engine beside the replay (--url, or --launch here): step for step."""
    from backend.service.engine_check import EngineCheckSettings, engine_check
    from backend.service.served_engines import engine_for

    options = server_options(args)
    if args.launch:  # a missing engine is refused before the target loads
        said = engine_for(args.engine).missing(options)
        if said:
            raise BadInput(said)
    if args.target_gguf and not Path(args.target_gguf).is_file():
        raise BadInput(f"{args.target_gguf}: no such GGUF file")
    samples, _ = load_samples(args.samples, checked_vocab(args), args.limit)
    if args.aux_hf_indices is not None:  # a bad override is refused before an engine launches
        from backend.service.checkpoints import checked_override

        checked_override(args.target, args.aux_hf_indices)
    settings = EngineCheckSettings(check_request(args, samples), timeout=args.timeout, options=options)
    name = settings.title
    bar, progress = percent_bar(f"{settings.server}-check")
    try:
        result = engine_check(args.db, samples, settings, url=args.url, progress=progress)
    finally:
        bar.close()
    lines = [f"{'prompt':>6} {name + ' AL':>10} {'replay AL':>9} {'steps':>9}  per-step accepted counts"]
    for r in result.rows:
        if r.equal_step_for_step:
            said = "equal step for step"
        else:
            d = r.first_difference
            said = f"differ from step {d.step} ({name} {d.served}, replay {d.replay})"
        lines.append(
            f"{r.prompt:>6} {fmt(r.served_accept_length):>10} {fmt(r.replay_accept_length):>9} "
            f"{r.served_steps:>4}/{r.replay_steps:<4}  {said}"
            + ("" if r.same_tokens in (True, None) else "; the greedy tokens differ")
        )
    launched = result.launched
    if launched and launched.converter_layers_line:
        lines.append("llama.cpp's converter: " + launched.converter_layers_line)
    if launched and launched.aux_layers_line:
        lines.append(f"{name}'s log: " + launched.aux_layers_line.split("]")[-1].strip())
    lines.append(f"replayed as {args.engine} with HF {result.wiring}")
    lines.append(result.headline)
    quantized = result.quantized
    if quantized:
        lines.append(
            f"served GGUF target {quantized.target_gguf} beside the F32 target (llama.cpp, same draft):"
        )
        lines.append(f"{'prompt':>6} {'F32 AL':>7} {'GGUF AL':>8}  first differing token")
        for q in quantized.rows:
            lines.append(
                f"{q.prompt:>6} {fmt(q.full_accept_length):>7} {fmt(q.quantized_accept_length):>8}  "
                + ("none" if q.first_differing_token is None else str(q.first_differing_token))
            )
        lines.append(
            f"{'mean':>6} {fmt(quantized.full_mean_accept_length):>7} "
            f"{fmt(quantized.quantized_mean_accept_length):>8}  ({quantized.said})"
        )
    lines.append(f"kept in {result.folder} (responses.jsonl, the server's log, result.json)")
    return result.to_dict(), "\n".join(lines)


def cmd_observe_requests(args) -> tuple[dict, str]:
    """observe --requests FILE [--replay-worst N] | --export-profile OUT --runs IDS"""
    from backend.service import per_request

    if args.export_profile:
        path, profile = per_request.export_profile(args.db, args.runs or [], args.export_profile)
        return {"out": str(path), "profile": profile}, (
            f"wrote {path}: runs {args.runs}, K={profile['num_speculative_tokens']}, mean accept length "
            f"{profile['mean_accept_length']:.3f} (step-weighted), {profile['mean_accept_length_per_request']:.3f} "
            "per run"
        )
    if args.replay_worst and not args.draft:
        raise BadInput("--replay-worst needs --draft (and --target) to replay with")
    served = per_request.ServedRequests(
        source=args.requests, format=args.format, num_speculative_tokens=args.num_speculative_tokens
    )
    result = per_request.observe_requests(args.db, served, args.draft, args.target)
    if args.replay_worst:
        per_request.replay_plan(result, args.replay_worst)  # refused before a model loads
        bar, progress = percent_bar("replay-worst")

        try:
            replayed = per_request.replay_worst(
                args.db,
                result,
                args.replay_worst,
                args.target or default_target(),
                args.draft,
                args.max_new_tokens,
                progress,
            )
        finally:
            bar.close()
        result = per_request.with_replays(result, replayed)
    pooled = result.pooled
    counted = ", ".join(f"{n} {status}" for status, n in pooled.statuses.items())
    lines = [
        f"{result.source}: {result.format}, "
        + (
            "a pooled profile, not per request"
            if pooled.pooled_only
            else f"{pooled.requests} requests ({counted})"
        ),
        f"pooled accept length {fmt(pooled.accept_length)} over {pooled.verify_steps} verify steps "
        f"(step-weighted, bonus included); per-request mean {fmt(pooled.accept_length_per_request_mean)}"
        f"{ci_text(pooled.accept_length_per_request_ci95)}; "
        f"acceptance rate {fmt(pooled.acceptance_rate)}",
    ]
    if pooled.per_position_marginal:
        lines.append("per-position P(a >= i): " + ", ".join(fmt(p) for p in pooled.per_position_marginal))
    for signature in (result.first_step, result.draft_lengths):
        if signature and signature.message:
            lines.append("signature: " + signature.message)
    if result.window:
        lines.append(f"window between the two reads: accept length {fmt(result.window.accept_length)}")
    lines.append(f"{'record':<22} {'status':<16} {'served AL':>9} {'replay AL':>9}  note")
    for row in result.rows[:50]:
        lines.append(
            f"{row.record[:22]:<22} {row.status:<16} {fmt(row.served_accept_length):>9} "
            f"{fmt(row.replay_accept_length):>9}  {row.note or ''}"
        )
    for row in result.replayed_worst:
        lines.append(
            f"replayed {row.record}: served {fmt(row.served_accept_length)}, replay "
            f"{fmt(row.replay_accept_length)} (run {row.replay_run})"
        )
    return result.to_dict(), "\n".join(lines)
