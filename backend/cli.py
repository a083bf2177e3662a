"""SpecLens CLI: python -m backend <command> ... [--json]

With --json one JSON object goes to stdout; logs and progress bars go to stderr. Exit code 0 on
success, 2 on bad input (one-line reason on stderr), 1 on an internal error, 3 when a
--min-accept-length gate is not met (the JSON is still printed).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from sqlalchemy.exc import SQLAlchemyError

from backend import BadInput, Terminated, first_line
from backend.data.per_request import FORMATS as REQUEST_FORMATS
from backend.defaults import active_pair, default_draft, default_eval_set, default_target

GATE_FAILED = 3  # exit code: --min-accept-length not met


def _aux_indices(text: str) -> tuple[int, ...]:
    from backend.engine.wiring import parse_aux_indices

    try:
        return parse_aux_indices(text)
    except BadInput as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def _steps(text: str) -> int:
    """K: 1..MAX_STEPS, as a replay request takes it (a teacher or probe run of K = 1000 would
    run for minutes per sample before anything said so)."""
    from backend.service.requests import MAX_STEPS

    value = _positive(text)
    if value > MAX_STEPS:
        raise argparse.ArgumentTypeError(f"must be in 1..{MAX_STEPS}, got {value}")
    return value


def _text(text: str) -> str:
    """Command-line text must be UTF-8 (bytes that are not arrive as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError("not UTF-8 text") from None
    return text


def _run_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected run ids like 3,4,5, got {text!r}") from None
    if not ids or any(i < 1 for i in ids):
        raise argparse.ArgumentTypeError(f"expected run ids >= 1, got {text!r}")
    return ids


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def dispatch_flags(sub) -> None:
    """A target split across devices (accelerate's big-model dispatch, backend/engine/dispatch.py)."""
    group = sub.add_argument_group("targets across devices")
    group.add_argument(
        "--device-map",
        help="auto, balanced, sequential, or a JSON object / file of module -> device (0, cuda:1, cpu, "
        "disk): load the target split across devices with accelerate",
    )
    group.add_argument(
        "--max-memory", help="per-device limits for --device-map, e.g. 0=20GiB,1=20GiB,cpu=64GiB"
    )


def decoding_flags(sub) -> None:
    """K, trees and sampling: the flags every replaying command shares."""
    sub.add_argument("--steps", type=_steps, default=4, help="K: draft tokens per verify step")
    sub.add_argument("--max-new-tokens", type=_positive, default=128)

    tree = sub.add_argument_group("trees and sampling (SGLang's flags and rules, docs/reference.md §12)")
    tree.add_argument(
        "--topk",
        type=_positive,
        help="children per frontier node (SGLang --speculative-eagle-topk; default 1: a chain)",
    )
    tree.add_argument(
        "--num-draft-tokens",
        type=_positive,
        help="tokens verified per step, the root included (SGLang --speculative-num-draft-tokens; "
        "topk 1 forces steps + 1)",
    )
    tree.add_argument("--temperature", type=_number, default=0.0, help="0 (default): greedy")
    tree.add_argument("--top-p", type=_number, default=1.0)
    tree.add_argument("--top-k", type=int, default=0, help="0 or -1: every token; 1 is greedy")
    tree.add_argument(
        "--seed", type=int, default=0, help="seeds every random draw: a run replays bit for bit"
    )
    tree.add_argument(
        "--draft-attention",
        choices=["ancestors", "sglang-slots"],
        default="ancestors",
        help="trees: draft nodes attend to their true ancestors, or to SGLang's per-rank KV slots",
    )


# The ReplayRequest fields that common(), decoding_flags() and dispatch_flags() set under their own
# names (K is --steps: num_steps); replay and evaluate read them from the flags through replay_settings.
SAME_NAMED_SETTINGS = (
    "max_new_tokens",
    "aux_hf_indices",
    "engine",
    "device",
    "dtype",
    "topk",
    "num_draft_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "draft_attention",
    "device_map",
    "max_memory",
)


def replay_settings(args) -> dict:
    """The ReplayRequest settings the flags give, for one replay (cmd_replay) or every pair (evaluate)."""
    return {"num_steps": args.steps} | {name: getattr(args, name) for name in SAME_NAMED_SETTINGS}


class OneLineParser(argparse.ArgumentParser):
    """Bad flags end as every bad input does: exit 2 and one line (the usage block is in --help)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def common(sub, several_drafts: bool = False) -> None:
    """The flags of every command that loads a pair: target, draft(s), device, dtype, wiring, engine."""
    sub.add_argument(
        "--target",
        default=default_target(),
        help="local Hugging Face target model directory (default: SPECLENS_TARGET, else the bundled SmolLM2 target once set up, else the toy demo/target)",
    )
    if several_drafts:
        sub.add_argument(
            "--draft",
            action="append",
            help="EAGLE-3 draft directory; repeat the flag for each draft to judge "
            "(default: SPECLENS_DRAFT, else the default pair's final)",
        )
    else:
        sub.add_argument(
            "--draft",
            default=default_draft(),
            help="EAGLE-3 draft directory, config.json + weights "
            "(default: SPECLENS_DRAFT, else the default pair's final)",
        )
    sub.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    sub.add_argument("--device", help="cuda, cpu, ... (default: cuda when available)")
    sub.add_argument("--dtype", help="fp32, bf16 or fp16 (default: bf16 on GPU, fp32 on CPU)")
    sub.add_argument(
        "--aux-hf-indices", type=_aux_indices, help="override wiring: three HF hidden_states indices"
    )
    sub.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "sglang", "vllm", "vllm-v2", "specforge", "speculators", "eagle"],
        help="read and run the draft as this engine does (wiring, variant flags, embedding); "
        "auto = the reading of the tool that trained it (docs/reference.md §10)",
    )


def _preflight_command(commands) -> None:
    pre = commands.add_parser("preflight", help="check a draft against a target")
    common(pre)
    pre.add_argument("--sample-length", type=_positive, help="check the draft's context against this length")
    pre.add_argument(
        "--write-fix",
        metavar="OUT",
        help="with --engine sglang, vllm or vllm-v2: write a copy of the draft to OUT whose config.json makes "
        "that engine feed the trained wiring",
    )


def _replay_command(commands) -> None:
    rep = commands.add_parser("replay", help="replay greedy speculative decoding and store it")
    common(rep)
    source = rep.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", type=_text, help="prompt text (tokenized with the target's tokenizer)")
    source.add_argument(
        "--samples", help="JSONL samples file; the prompt is a sample's first n_prompt_tokens"
    )
    rep.add_argument("--index", type=int, default=0, help="which valid sample of --samples (0-based)")
    rep.add_argument(
        "--chat-template",
        action="store_true",
        help="with --prompt: send it as one user message behind the target's chat template (as a chat "
        "server does); without it the text is tokenized raw",
    )
    rep.add_argument("--db", help="SQLAlchemy URL (default: SPECLENS_DB_URL or sqlite:///data/speclens.db)")
    rep.add_argument("--no-record", action="store_true", help="skip probabilities and hidden states")
    decoding_flags(rep)
    dispatch_flags(rep)
    gate(rep)


def _evaluate_command(commands) -> None:
    ev = commands.add_parser(
        "evaluate", help="replay a whole dataset for one or more drafts; per-draft accept length table"
    )
    common(ev, several_drafts=True)
    ev.add_argument("--samples", required=True, help="dataset file or folder (any importable format)")
    ev.add_argument("--format", choices=["jsonl", "sharegpt", "specforge", "prompts"], help="default: detect")
    ev.add_argument("--limit", type=_positive, help="only the first N valid samples")
    ev.add_argument("--source", help="only samples whose source contains this text")
    decoding_flags(ev)
    dispatch_flags(ev)
    ev.add_argument("--db", help="SQLAlchemy URL (default: SPECLENS_DB_URL or sqlite:///data/speclens.db)")
    ev.add_argument("--no-resume", action="store_true", help="replay every pair, even those already stored")
    ev.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=os.environ.get("SPECLENS_RAY_ADDRESS"),
        help="fan out to a Ray cluster (address, or 'local'; default: SPECLENS_RAY_ADDRESS); "
        "one actor per GPU, or per CPU slot on a CPU cluster",
    )
    ev.add_argument("--workers", type=_positive, help="Ray actors to start (default: one per GPU / CPU)")
    ev.add_argument(
        "--ray-timeout",
        type=_positive_float,
        default=30.0,
        metavar="S",
        help="seconds to wait for the Ray cluster to answer before giving up (default 30)",
    )


def _teacher_command(commands) -> None:
    tea = commands.add_parser("teacher", help="teacher-forced acc_k and simulated accept length")
    common(tea)
    tea.add_argument("--samples", required=True, help="JSONL samples file")
    tea.add_argument("--limit", type=_positive, help="use the first N valid samples")
    tea.add_argument("--steps", type=_steps, default=4, help="K: TTT steps to evaluate")
    gate(tea)


def _probe_command(commands) -> None:
    probe = commands.add_parser("probe", help="which aux-layer wiring was the draft trained on?")
    common(probe)
    probe.add_argument(
        "--samples",
        default=default_eval_set(),
        help="JSONL samples file (default: the default pair's eval set)",
    )
    probe.add_argument("--limit", type=_positive, default=8, help="use the first N valid samples (default 8)")
    probe.add_argument("--steps", type=_steps, default=4, help="K: TTT steps to score")
    probe.add_argument("--budget", type=int, default=40, help="extra candidates the local search may try")
    probe.add_argument(
        "--live",
        type=int,
        default=0,
        metavar="N",
        help="also replay live on the first N samples for the best, declared and runner-up",
    )
    probe.add_argument("--live-tokens", type=_positive, default=64)


REQUEST_HELP = (
    "request bodies as sent (a JSON object, a list, or JSONL; OpenAI or SGLang /generate): "
    "penalties, grammar and adapters they ask for are checked"
)


def _diagnose_command(commands) -> None:
    diag = commands.add_parser(
        "diagnose", help="why is this draft accepted less than it should be? one verdict"
    )
    common(diag)
    diag.add_argument(
        "--samples", help="JSONL samples: with them the probes, the template check and live replays run"
    )
    diag.add_argument("--limit", type=_positive, default=8, help="use the first N valid samples (default 8)")
    diag.add_argument("--steps", type=_steps, default=4, help="K: draft tokens per verify step")
    serving = diag.add_mutually_exclusive_group()
    serving.add_argument("--sglang", metavar="CMD", help="the SGLang launch command the draft is served with")
    serving.add_argument("--vllm", metavar="ARGS", help="the vLLM arguments the draft is served with")
    diag.add_argument(
        "--context", type=_positive, help="the served context length: checks and an accept-length curve"
    )
    diag.add_argument("--request", metavar="FILE", help=REQUEST_HELP)
    diag.add_argument(
        "--live", type=int, default=2, metavar="N", help="live replays on the first N samples (default 2)"
    )


def _import_command(commands) -> None:
    imp = commands.add_parser("import", help="validate and store a dataset")
    imp.add_argument(
        "--samples", required=True, help="JSONL, ShareGPT JSON/JSONL, .ckpt file or folder, or .txt"
    )
    imp.add_argument("--name", help="dataset name (default: the file name)")
    imp.add_argument(
        "--format",
        choices=["jsonl", "sharegpt", "specforge", "prompts"],
        help="default: detected from the file",
    )
    imp.add_argument(
        "--target",
        default=default_target(),
        help="target directory: its tokenizer renders ShareGPT/prompts, its vocab bounds token ids",
    )
    imp.add_argument("--db", help="SQLAlchemy URL (default: SPECLENS_DB_URL or sqlite:///data/speclens.db)")
    imp.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _export_command(commands) -> None:
    exp = commands.add_parser("export", help="write a stored run as CSV, JSON or Parquet")
    exp.add_argument("--run", type=int, required=True, help="run id")
    exp.add_argument("--format", required=True, choices=["csv", "json", "parquet"])
    exp.add_argument("--out", required=True, help="output file")
    exp.add_argument("--db", help="SQLAlchemy URL (default: SPECLENS_DB_URL or sqlite:///data/speclens.db)")
    exp.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _observe_command(commands) -> None:
    obs = commands.add_parser(
        "observe", help="read what SGLang or vLLM reported and put it beside the replay"
    )
    served = obs.add_mutually_exclusive_group(required=True)
    served.add_argument(
        "--sglang-log", help="an SGLang server log (decode-batch lines and the server_args dump)"
    )
    served.add_argument(
        "--vllm-metrics",
        action="append",
        metavar="FILE_OR_URL",
        help="a vLLM /metrics scrape (file or URL); give it twice (earlier, later) for a window",
    )
    served.add_argument(
        "--requests",
        metavar="FILE_OR_URL",
        help="per-request numbers: a JSONL of responses (or one JSON document) as an engine wrote them",
    )
    served.add_argument(
        "--export-profile",
        metavar="OUT",
        help="write --runs (a run, or an evaluation's runs) as ModelOpt's speculation_profile.json",
    )
    obs.add_argument(
        "--format",
        default="auto",
        choices=["auto", *REQUEST_FORMATS],
        help="the engine format of --requests (default: detected)",
    )
    obs.add_argument(
        "--replay-worst",
        type=_positive,
        metavar="N",
        help="with --requests: replay the prompts of the N worst requests with --draft at the served K",
    )
    obs.add_argument(
        "--max-new-tokens", type=_positive, help="for --replay-worst (default: each request's length)"
    )
    obs.add_argument("--runs", type=_run_ids, help="with --export-profile: run ids, comma-separated")
    obs.add_argument(
        "--draft", help="the local copy of the draft the server ran (for the lint and the comparison)"
    )
    obs.add_argument("--target", help="target directory (for the lint, text prompts and --replay-worst)")
    obs.add_argument(
        "--num-speculative-tokens",
        type=_positive,
        help="K, for vLLM V0 metrics (no draft count), llama.cpp timings (no step count) or SGLang",
    )
    obs.add_argument("--db", help="SQLAlchemy URL (default: SPECLENS_DB_URL or sqlite:///data/speclens.db)")
    obs.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _serve_check_command(commands) -> None:
    check = commands.add_parser("serve-check", help="per-sample accept length from a server vs the replay")
    common(check)
    check.add_argument(
        "--url",
        help="the server: SGLang's (its native /generate returns meta_info), or with --engine vllm vLLM's "
        "OpenAI server started with --per-request-spec-decode-metrics detailed",
    )
    check.add_argument(
        "--launch",
        action="store_true",
        help="with --engine vllm: start vLLM here on 127.0.0.1 with the pair, check, stop it",
    )
    check.add_argument(
        "--vllm-python",
        metavar="PY",
        help="the Python that has vLLM, for --launch (default: SPECLENS_VLLM_PYTHON or .venv-vllm/bin/python)",
    )
    check.add_argument(
        "--samples",
        help="JSONL samples file: their prompts are sent (with --responses: the prompts, in order, where "
        "the responses carry no input_ids)",
    )
    check.add_argument(
        "--features",
        action="store_true",
        help="compare the features SGLang fed the draft (meta_info.hidden_states, --enable-return-hidden-states) "
        "with the target's layers, slot by slot",
    )
    check.add_argument(
        "--responses",
        metavar="FILE",
        help="with --features: saved SGLang /generate responses (JSON list or JSONL) instead of --url",
    )
    check.add_argument("--limit", type=_positive, default=8, help="the first N valid samples (default 8)")
    check.add_argument("--steps", type=_steps, default=4, help="K the server runs (chain: num_steps)")
    check.add_argument("--topk", type=_positive, help="the server's --speculative-eagle-topk (default 1)")
    check.add_argument(
        "--num-draft-tokens", type=_positive, help="the server's --speculative-num-draft-tokens (trees)"
    )
    check.add_argument("--max-new-tokens", type=_positive, default=128)
    check.add_argument(
        "--timeout",
        type=_positive_float,
        default=60.0,
        metavar="S",
        help="seconds to wait for each answer; the first request without one ends the run (default 60)",
    )
    check.add_argument("--db", help="SQLAlchemy URL (default: SPECLENS_DB_URL or sqlite:///data/speclens.db)")


def _lint_command(commands) -> None:
    lint = commands.add_parser("lint", help="check SGLang/vLLM serving flags against a draft")
    lint.add_argument("--draft", help="the draft directory (default: the path in the command line)")
    lint.add_argument(
        "--target",
        help="target directory, for its architecture, depth and context "
        "(default: the command's --model-path when it is a local directory)",
    )
    engine = lint.add_mutually_exclusive_group(required=True)
    engine.add_argument("--sglang", help="an SGLang launch command (python -m sglang.launch_server ...)")
    engine.add_argument("--vllm", help="vLLM arguments (vllm serve ... --speculative-config '{...}')")
    lint.add_argument("--request", metavar="FILE", help=REQUEST_HELP)
    lint.add_argument("--json", action="store_true", help="print one JSON object on stdout")


# One function a command, in the order --help lists them.
PARSERS = (
    _preflight_command,
    _replay_command,
    _evaluate_command,
    _teacher_command,
    _probe_command,
    _diagnose_command,
    _import_command,
    _export_command,
    _observe_command,
    _serve_check_command,
    _lint_command,
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m backend", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for add_command in PARSERS:
        add_command(commands)
    return parser


def gate(sub) -> None:
    sub.add_argument(
        "--min-accept-length",
        type=_number,
        metavar="X",
        help="CI gate: exit 3 when the accept length (incl. bonus) is below X; for teacher the "
        "predicted accept length 1 + simulated accept length is compared",
    )


def progress_bar(total: int, description: str, unit: str = "tok"):
    from tqdm import tqdm

    return tqdm(total=total, desc=description, file=sys.stderr, unit=unit, leave=False)


def percent_bar(description: str):
    """(bar, progress): a stderr bar in percent and the `progress(fraction, message)` that moves it."""
    bar = progress_bar(100, description, unit="%")

    def progress(fraction: float, message: str) -> None:
        bar.set_postfix_str(message[-60:], refresh=False)
        bar.update(round(100 * fraction) - bar.n)

    return bar, progress


def cmd_preflight(args) -> tuple[dict, str]:
    from backend.engine.preflight import preflight

    report = preflight(args.draft, args.target, args.sample_length, args.aux_hf_indices).to_dict()
    lines = [f"{c['status'].upper():5} {c['name']}: {c['message']}" for c in report["checks"]]
    if args.write_fix:
        report["fixed_draft"] = _write_fix(args, report)
        lines.append(report["fixed_draft"]["said"])
    if report["engines"]:
        lines.append(f"how each engine reads this draft (training reading: {report['training_engine']}):")
        lines.append(f"  {'engine':<12} {'aux HF':<14} {'feedback':<9} {'embedding':<25} loads")
        for name, view in report["engines"].items():
            loads = "yes" if view["loads"] else f"no: {view['refusal']}"
            lines.append(
                f"  {name:<12} {str(view['aux_hf_indices']):<14} {view['feedback']:<9} "
                f"{view['embedding']:<25} {loads}"
            )
    lines.append(f"aux HF indices: {report['aux_hf_indices']}  ->  {'OK' if report['ok'] else 'FAILED'}")
    return report, "\n".join(lines)


def _write_fix(args, report: dict) -> dict:
    from backend.engine.readings import SERVING_ENGINES
    from backend.service.draft_fix import write_fixed_draft

    if args.engine not in SERVING_ENGINES:
        raise BadInput(
            f"--write-fix goes with --engine {' / '.join(SERVING_ENGINES)} (the engine to fix for)"
        )
    fix = next((f for f in report["serving_fixes"] if f["engine"] == args.engine), None)
    if fix is None:
        return {"path": None, "said": f"no fix to write: {args.engine} already feeds the trained wiring"}
    path = write_fixed_draft(args.draft, args.write_fix, fix["config_update"])
    return {
        "path": str(path),
        "config_update": fix["config_update"],
        "said": f"wrote {path}: {fix['message']}",
    }


def load_pair(args, sample_length: int):
    """(target, draft, wiring) for teacher/probe: the draft is refused with the preflight's reasons
    when it fails; its warnings go to stderr."""
    from backend.service import models
    from backend.service.plan import preflight_warnings
    from backend.service.requests import reading_of

    target, draft, report = models.pair(args.target, args.draft, args.device, args.dtype)
    view, wiring = reading_of(args.engine, args.aux_hf_indices, draft, target.num_layers)
    for warning in preflight_warnings(report, draft, sample_length) + list(view.notes):
        print(f"warning: {warning}", file=sys.stderr)
    return target, draft, wiring, view


def cmd_replay(args) -> tuple[dict, str]:
    from backend.data.samples import sample_at
    from backend.engine.metrics import DEFINITIONS
    from backend.engine.records import decoding_mode
    from backend.service import models
    from backend.service.jobs import run_replay
    from backend.service.requests import ReplayRequest

    vocab_size = checked_vocab(args)
    if args.samples:
        sample = sample_at(args.samples, args.index, vocab_size)
        source = {"prompt_ids": tuple(sample.prompt_ids), "sample_ref": f"{args.samples}#{args.index}"}
    else:
        source = {"prompt_text": args.prompt, "sample_ref": "prompt", "chat_template": args.chat_template}
    request = ReplayRequest(
        args.target,
        args.draft,
        record=not args.no_record,
        **replay_settings(args),
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
    target = models.target(args.target, args.device, args.dtype, args.device_map, args.max_memory)  # cached
    metrics, wiring = outcome.metrics, outcome.wiring
    result = {
        "run_id": outcome.run_id,
        "output_ids": outcome.output_ids,
        "steps": [
            {"drafted": s.drafted_ids, "accepted": s.accepted_count, "bonus": s.bonus_id, "tree": s.tree}
            for s in outcome.steps
        ],
        "mean_accept_length": metrics["mean_accept_length"],
        "accepted_per_step": [s.accepted_count for s in outcome.steps],
        "per_position_marginal": metrics["per_position_marginal"],
        "per_position_conditional": metrics["per_position_conditional"],
        "aux_hf_indices": list(wiring.aux_hf_indices),
        "wiring_source": wiring.source,
        "engine": outcome.engine,
        "acceptance_rate": metrics["acceptance_rate"],
        "accept_histogram": metrics["accept_histogram"],
        "num_steps": args.steps,
        "device": str(target.device),
        "dtype": str(target.dtype).replace("torch.", ""),
        "self_disagreement_per_1000": metrics.get("self_disagreement_per_1000"),
        "mode": decoding_mode(outcome.params),
        "topk": outcome.params["topk"],
        "num_draft_tokens": outcome.params["num_draft_tokens"],
        "requested": outcome.params["requested"],
        "sampling": {
            k: outcome.params[k] for k in ("temperature", "top_p", "top_k", "seed", "sampling_rule")
        },
        "draft_attention": outcome.params["draft_attention"],
        "expected_accept_length": metrics.get("expected_accept_length"),
        "definitions": {
            k: DEFINITIONS[k]
            for k in (
                "mean_accept_length",
                "per_position_marginal",
                "per_position_conditional",
                "acceptance_rate",
                "self_disagreement_per_1000",
                "expected_accept_length",
            )
        },
    }
    text = (
        f"run {outcome.run_id}: {len(outcome.output_ids)} tokens in {len(outcome.steps)} verify steps, "
        f"accept length {_fmt(metrics['mean_accept_length'])} (mean of a+1, bonus included), "
        f"K={args.steps}, {decoding_mode(outcome.params)}, aux HF indices {list(wiring.aux_hf_indices)} "
        f"({wiring.source})"
    )
    if metrics.get("expected_accept_length") is not None and outcome.params.get("sampling_rule"):
        text += f"; expected accept length {_fmt(metrics['expected_accept_length'])}"
    if target.tokenizer is not None:
        text += "\n" + target.tokenizer.decode(outcome.output_ids)
    return result, text


def cmd_teacher(args) -> tuple[dict, str]:
    from backend.engine.teacher import TeacherCounts, teacher_forced_counts

    samples, rejected = load_samples(args.samples, checked_vocab(args), args.limit)
    target, draft, wiring, view = load_pair(args, max(len(s.input_ids) for s in samples))
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
        + ", ".join(_fmt(a) for a in totals.acc_per_step)
        + f"; simulated accept length {_fmt(totals.simulated_accept_length)} (sum_k prod_j<=k acc_j, no bonus)"
    )
    return result, text


def checked_vocab(args) -> int:
    """The target's vocab size from its config, after both configs are checked: a bad target,
    draft or flag is reported before any weights load (seconds, and progress bars, later)."""
    from backend.engine.draft_config import read_draft_config
    from backend.engine.loading import pick_device, read_target_config
    from backend.engine.wiring import check_indices

    config = read_target_config(args.target)
    if isinstance(getattr(args, "draft", None), str):
        read_draft_config(args.draft)
    if getattr(args, "aux_hf_indices", None) is not None:  # a wiring the target cannot have, before loading
        check_indices(args.aux_hf_indices, config.num_hidden_layers)
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
    from backend.service.diagnosis import diagnose, serving_engine

    serving_engine(args.engine, args.sglang, args.vllm)  # contradictions before anything loads
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
            num_steps=args.steps,
            live_samples=max(0, args.live),
            device=args.device,
            dtype=args.dtype,
        )
        result = diagnose(args.target, args.draft, samples, options, progress)
    finally:
        bar.close()
    lines = [f"verdict: {result['verdict'].upper()}: {result['headline']}"]
    for finding in result["findings"]:
        lines.append(f"  {finding['severity'].upper():4} {finding['class']}: {finding['message']}")
        if finding["fix"]:
            lines.append(f"       fix: {finding['fix']}")
    lines += [f"  ({check}: {what})" for check, what in result["checks"].items()]
    return result, "\n".join(lines)


def cmd_probe(args) -> tuple[dict, str]:
    from backend.diagnostics.probe import ProbeSettings, run_probe

    samples, _ = load_samples(args.samples, checked_vocab(args), args.limit)
    target, draft, wiring, view = load_pair(args, max(len(s.input_ids) for s in samples))
    bar, progress = percent_bar("probe")

    try:
        settings = ProbeSettings(args.steps, args.budget, args.live, args.live_tokens)
        report = run_probe(target, draft, wiring, samples, settings, progress, view.math)
    finally:
        bar.close()
    lines = [f"{'HF indices':>14}  acc_0  pred. AL  label"]
    for c in report.candidates[:12]:
        predicted = "  n/a " if c.simulated is None else f"{1 + c.simulated:6.2f}"
        lines.append(
            f"{str(list(c.aux_hf_indices)):>14}  {c.acc_step0:.3f}  {predicted}    {'; '.join(c.labels)}"
        )
    lines.append(f"({len(report.candidates)} candidates, {report.n_samples} samples, {report.seconds:.1f} s)")
    lines.append(report.verdict)
    return report.to_dict(), "\n".join(lines)


def cmd_import(args) -> tuple[dict, str]:
    from backend.service.datasets import ensure_demo_dataset, import_dataset

    ensure_demo_dataset(args.db)
    dataset_id, result = import_dataset(args.db, args.samples, args.name, args.target, args.format)
    rejected = [{"line": r.line, "reason": r.reason} for r in result.rejected]
    lines = [
        f"dataset {dataset_id}: imported {result.imported} {result.format} samples, rejected {len(rejected)}"
    ] + [f"  line {r['line']}: {r['reason']}" for r in rejected[:50]]
    return {
        "dataset_id": dataset_id,
        "imported": result.imported,
        "rejected": rejected,
        "format": result.format,
    }, "\n".join(lines)


def cmd_export(args) -> tuple[dict, str]:
    from backend.service.runs import export

    path = export(args.db, args.run, args.format, args.out)
    return {"run_id": args.run, "format": args.format, "out": str(path)}, f"wrote {path}"


def cmd_lint(args) -> tuple[dict, str]:
    from backend.diagnostics.lint import lint_command

    report = lint_command(
        args.draft, args.sglang, args.vllm, args.target, request_file=args.request
    ).to_dict()
    lines = [
        f"{f['severity'].upper():7} {f['code']}: {f['message']}\n        fix: {f['fix']}"
        for f in report["findings"]
    ]
    if report["effective_flags"]:
        lines.append(f"{report['engine']} will run: {report['effective_flags']}")
    lines.append(f"{len(report['findings'])} findings, {report['errors']} errors")
    return report, "\n".join(line for line in lines if line)


def gate_value(args, result: dict) -> tuple[str, float | None] | None:
    if getattr(args, "min_accept_length", None) is None:
        return None
    if args.command == "teacher":
        simulated = result["simulated_accept_length"]
        return "predicted accept length (1 + simulated)", None if simulated is None else 1 + simulated
    return "accept length", result["mean_accept_length"]


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def cmd_observe(args) -> tuple[dict, str]:
    from backend.service.observations import observe

    if args.runs and not args.export_profile:
        raise BadInput("--runs goes with --export-profile OUT")
    if args.replay_worst and not args.requests:
        raise BadInput("--replay-worst goes with --requests FILE")
    if args.requests or args.export_profile:
        return cmd_observe_requests(args)

    engine, sources = ("sglang", [args.sglang_log]) if args.sglang_log else ("vllm", args.vllm_metrics)
    result = observe(args.db, engine, sources, args.draft, args.target, args.num_speculative_tokens)
    lines = [
        f"observation {result['observation_id']}: {engine} accept length {_fmt(result['accept_length'])} "
        f"({result['definition']})"
    ]
    if result["per_position"]:
        lines.append("per-position acceptance: " + ", ".join(f"{p:.3f}" for p in result["per_position"]))
    if result["settings"]:
        lines.append(
            "settings the server ran with: " + ", ".join(f"{k}={v}" for k, v in result["settings"].items())
        )
    lines += [f"{f['severity'].upper():7} {f['code']}: {f['message']}" for f in result["lint"]]
    replay = result["replay"]
    lines.append(
        f"offline replay of this draft at K={result['num_steps']}: {_fmt(replay['accept_length'])} "
        f"({replay['runs']} runs)"
    )
    lines.append(result["verdict"])
    return result, "\n".join(lines)


def cmd_serve_check(args) -> tuple[dict, str]:
    from backend.service.observations import ServeCheckSettings, check_server_url, serve_check

    if args.features or args.responses:
        return cmd_feature_check(args)
    if not args.samples:
        raise BadInput("serve-check: --samples FILE is needed (their prompts are sent)")
    vllm = args.engine in ("vllm", "vllm-v2")
    if (args.url is None) == (not args.launch) or (args.launch and not vllm):
        raise BadInput(
            "serve-check: give --url URL, or --launch with --engine vllm (SpecLens starts vLLM on the pair)"
        )
    if args.url is not None:
        check_server_url(args.url)  # before the target loads
    if vllm:
        return cmd_vllm_check(args)
    samples, _ = load_samples(args.samples, checked_vocab(args), args.limit)
    settings = ServeCheckSettings(
        args.target,
        args.draft,
        args.steps,
        args.max_new_tokens,
        args.engine,
        topk=args.topk,
        num_draft_tokens=args.num_draft_tokens,
        timeout=args.timeout,
    )
    result = serve_check(args.db, args.url, samples, settings)
    lines = [f"{'sample':>6} {'server AL':>9} {'replay AL':>9}"]
    lines += [
        f"{r['sample']:>6} {_fmt(r['server_accept_length']):>9} {_fmt(r['replay_accept_length']):>9}"
        for r in result["rows"]
    ]
    lines.append(
        f"{'mean':>6} {_fmt(result['server_mean_accept_length']):>9} {_fmt(result['replay_mean_accept_length']):>9}"
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
    for slot in result["slots"]:
        other = slot["runner_up"]
        lines.append(
            f"{slot['slot']:>4} {'-' if slot['best'] is None else slot['best']:>6} {slot['cosine']:>7.4f} "
            f"{slot['norm_ratio']:>10.3f}  "
            + (f"HF {other['hf_index']} ({other['cosine']:.4f})" if other else "")
        )
    lines.append(
        f"trained on HF {result['trained_hf']}; SGLang reads the config as HF {result['sglang_reads_hf']}"
    )
    lines += [
        f"response {r['response']}: {r['layout']}, {r['rows_compared']} rows" for r in result["requests"]
    ]
    if result["note"]:
        lines.append(result["note"])
    lines.append(("ok: " if result["fed_as_trained"] else "MISMATCH: ") + result["verdict"])
    return result, "\n".join(lines)


def cmd_vllm_check(args) -> tuple[dict, str]:
    from backend.service.engine_check import EngineCheckSettings, engine_check
    from backend.service.vllm_server import vllm_python

    if args.launch:
        vllm_python(args.vllm_python)  # a missing vLLM is refused before the target loads
    samples, _ = load_samples(args.samples, checked_vocab(args), args.limit)
    settings = EngineCheckSettings(
        args.target,
        args.draft,
        args.steps,
        args.max_new_tokens,
        args.engine,
        args.aux_hf_indices,
        timeout=args.timeout,
        device=args.device,
        dtype=args.dtype,
    )
    bar, progress = percent_bar("vllm-check")
    try:
        result = engine_check(
            args.db, samples, settings, url=args.url, python=args.vllm_python, progress=progress
        )
    finally:
        bar.close()
    lines = [f"{'prompt':>6} {'vLLM AL':>8} {'replay AL':>9} {'steps':>9}  per-step accepted counts"]
    for r in result["rows"]:
        if r["equal_step_for_step"]:
            said = "equal step for step"
        else:
            d = r["first_difference"]
            said = f"differ from step {d['step']} (vLLM {d['served']}, replay {d['replay']})"
        lines.append(
            f"{r['prompt']:>6} {_fmt(r['served_accept_length']):>8} {_fmt(r['replay_accept_length']):>9} "
            f"{r['served_steps']:>4}/{r['replay_steps']:<4}  {said}"
            + ("" if r["same_tokens"] in (True, None) else "; the greedy tokens differ")
        )
    launched = result.get("launched")
    if launched and launched.get("aux_layers_line"):
        lines.append("vLLM's log: " + launched["aux_layers_line"].split("]")[-1].strip())
    lines.append(f"replayed as {args.engine} with HF {result['wiring']}")
    lines.append(result["headline"])
    lines.append(f"kept in {result['folder']} (responses.jsonl: observe --requests reads it)")
    return result, "\n".join(lines)


def cmd_evaluate(args) -> tuple[dict, str]:
    from pathlib import Path

    from backend.data.importer import check_source, read_dataset

    check_source(args.samples)  # a bad path is refused before the model stack is imported
    from backend.engine.loading import read_target_config
    from backend.service import evaluate

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
    settings = replay_settings(args)
    plan = evaluate.Plan(
        args.target, drafts, samples, settings, str(args.samples), {d: Path(d).name or d for d in drafts}
    )
    total = len(drafts) * len(samples)
    bar = progress_bar(total, "evaluate", unit="run")

    def report(fraction: float, message: str) -> None:
        bar.update(round(fraction * total) - bar.n)
        bar.set_postfix_str(message[-60:], refresh=False)

    try:
        result = evaluate.evaluate(
            args.db, plan, not args.no_resume, report, args.ray, args.workers, args.ray_timeout
        )
    finally:
        bar.close()
    text = (
        f"{len(samples)} samples x {len(drafts)} drafts: {result['replayed']} replayed, {result['reused']} "
        f"already stored\n" + evaluate.table(result)
    )
    return result, text


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
            result["replayed_worst"] = per_request.replay_worst(
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
    pooled = result["pooled"]
    counted = ", ".join(f"{n} {status}" for status, n in pooled["statuses"].items())
    lines = [
        f"{result['source']}: {result['format']}, "
        + (
            "a pooled profile, not per request"
            if pooled.get("pooled_only")
            else f"{pooled['requests']} requests ({counted})"
        ),
        f"pooled accept length {_fmt(pooled['accept_length'])} over {pooled['verify_steps']} verify steps "
        f"(step-weighted, bonus included); per-request mean {_fmt(pooled['accept_length_per_request_mean'])}"
        f"{_ci(pooled.get('accept_length_per_request_ci95'))}; "
        f"acceptance rate {_fmt(pooled['acceptance_rate'])}",
    ]
    if pooled["per_position_marginal"]:
        lines.append("per-position P(a >= i): " + ", ".join(_fmt(p) for p in pooled["per_position_marginal"]))
    for signature in ("first_step", "draft_lengths"):
        if (result.get(signature) or {}).get("message"):
            lines.append("signature: " + result[signature]["message"])
    if result.get("window"):
        lines.append(
            f"window between the two reads: accept length {_fmt(result['window'].get('accept_length'))}"
        )
    lines.append(f"{'record':<22} {'status':<16} {'served AL':>9} {'replay AL':>9}  note")
    for row in result["rows"][:50]:
        lines.append(
            f"{row['record'][:22]:<22} {row['status']:<16} {_fmt(row['served_accept_length']):>9} "
            f"{_fmt(row['replay_accept_length']):>9}  {row['note'] or ''}"
        )
    for row in result.get("replayed_worst", []):
        lines.append(
            f"replayed {row['record']}: served {_fmt(row['served_accept_length'])}, replay "
            f"{_fmt(row['replay_accept_length'])} (run {row['replay_run']})"
        )
    return result, "\n".join(lines)


COMMANDS = {
    "observe": cmd_observe,
    "serve-check": cmd_serve_check,
    "preflight": cmd_preflight,
    "replay": cmd_replay,
    "evaluate": cmd_evaluate,
    "teacher": cmd_teacher,
    "lint": cmd_lint,
    "probe": cmd_probe,
    "diagnose": cmd_diagnose,
    "import": cmd_import,
    "export": cmd_export,
}


def _terminate(_signum, _frame):
    """SIGTERM: a recording replay stops at its next record (never inside a database write), as
    interrupted; anything else stops at once."""
    jobs = sys.modules.get("backend.service.jobs")
    if jobs is not None and jobs.RECORDING.is_set():
        jobs.STOP.set()
        return
    raise Terminated()


def _refusal(error: BaseException, url: str | None) -> str | None:
    if not isinstance(error, SQLAlchemyError | OSError):
        return None
    from backend.service.database import refusal

    return refusal(error, url)


def _ci(interval) -> str:
    """' (95% CI [a, b] over requests)' when there is one."""
    return "" if not interval else f" (95% CI [{interval[0]:.2f}, {interval[1]:.2f}] over requests)"


def _fallback_note(args) -> None:
    """A command that ran on the defaults while the real pair is not set up says what it ran on."""
    fallback = active_pair().fallback
    if (
        fallback
        and not os.environ.get("SPECLENS_TARGET")
        and getattr(args, "target", None) == default_target()
    ):
        print(f"note: using the toy demo pair: {fallback}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        result, text = COMMANDS[args.command](args)
    except (BadInput, FileNotFoundError) as error:
        print(f"error: {first_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        name = "SIGTERM" if isinstance(stop, Terminated) else "interrupt"
        print(
            f"interrupted ({name}): a running replay is marked interrupted with its committed steps",
            file=sys.stderr,
        )
        return 143 if isinstance(stop, Terminated) else 130
    except Exception as error:  # noqa: BLE001 - the CLI contract: internal errors exit 1 with a reason
        said = _refusal(error, getattr(args, "db", None))
        if said is not None:  # the database or the disk refused: exit 2, one line
            print(f"error: {said}", file=sys.stderr)
            return 2
        print(f"internal error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        print(json.dumps(result))
    else:
        print(text)
    if args.command == "preflight" and not result["ok"]:
        first = next(c for c in result["checks"] if c["status"] == "fail")
        print(f"error: preflight failed: {first['name']}: {first['message']}", file=sys.stderr)
        return 2
    checked = gate_value(args, result)
    if checked is not None:
        name, value = checked
        if value is None or value < args.min_accept_length:
            print(
                f"gate failed: {name} {_fmt(value)} < --min-accept-length {args.min_accept_length}",
                file=sys.stderr,
            )
            return GATE_FAILED
        print(f"gate passed: {name} {_fmt(value)} >= {args.min_accept_length}", file=sys.stderr)
    _fallback_note(args)  # last, and only on success: a refusal stays one line
    return 0
