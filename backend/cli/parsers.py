"""One parser a command, in the order --help lists them (flags shared across commands: flags.py)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from backend.cli.flags import (
    OneLineParser,
    common,
    decoding_flags,
    dispatch_flags,
    gate,
    non_negative,
    positive,
    positive_float,
    run_id,
    run_ids,
    setting_flag,
    utf8_text,
)
from backend.cli.serving_parsers import REQUEST_HELP, lint_command, serve_check_command
from backend.data.per_request import FORMATS as REQUEST_FORMATS
from backend.defaults import default_eval_set, default_target

DESCRIPTION = """SpecLens CLI: python -m backend <command> ... [--json]

With --json one JSON object goes to stdout; logs and progress bars go to stderr. Exit code 0 on
success, 2 on bad input (one-line reason on stderr), 1 on an internal error, 3 when a
--min-accept-length gate is not met (the JSON is still printed).
"""


def _preflight_command(commands) -> None:
    pre = commands.add_parser("preflight", help="check a draft against a target")
    common(pre)
    pre.add_argument("--sample-length", type=positive, help="check the draft's context against this length")
    pre.add_argument(
        "--write-fix",
        metavar="OUT",
        help="with --engine sglang, vllm or vllm-v2: write a copy of the draft to OUT whose config.json makes "
        "that engine feed the trained wiring",
    )
    pre.add_argument(
        "--measure",
        metavar="SAMPLES",
        help="with --write-fix: replay the draft and the fixed copy on the first --measure-limit samples of "
        "this file, read as --engine, and print both accept lengths (stored as runs)",
    )
    pre.add_argument(
        "--measure-limit", type=positive, default=4, help="samples --measure replays (default 4)"
    )


def _replay_command(commands) -> None:
    rep = commands.add_parser(
        "replay", help="replay speculative decoding (greedy or sampled, chain or tree) and store it"
    )
    common(rep)
    source = rep.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--prompt", type=utf8_text, help="prompt text (tokenized with the target's tokenizer)"
    )
    source.add_argument(
        "--samples", help="JSONL samples file; the prompt is a sample's first n_prompt_tokens"
    )
    rep.add_argument(
        "--index", type=non_negative, help="which valid sample of --samples (0-based; default 0)"
    )
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
    ev.add_argument("--limit", type=positive, help="only the first N valid samples")
    ev.add_argument("--source", help="only samples whose source contains this text")
    decoding_flags(ev)
    dispatch_flags(ev)
    ev.add_argument("--db", help="SQLAlchemy URL (default: SPECLENS_DB_URL or sqlite:///data/speclens.db)")
    ev.add_argument("--no-resume", action="store_true", help="replay every pair, even those already stored")
    ev.add_argument(
        "--batch",
        type=positive,
        metavar="N",
        help="samples replayed together in one batch per draft (default: as many as half the free memory "
        "holds, at most 16; 1: one at a time; trees and sampled acceptance always run one at a time)",
    )
    ev.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=os.environ.get("SPECLENS_RAY_ADDRESS"),
        help="fan out to a Ray cluster (address, or 'local'; default: SPECLENS_RAY_ADDRESS); "
        "one actor per GPU, or per CPU slot on a CPU cluster",
    )
    ev.add_argument("--workers", type=positive, help="Ray actors to start (default: one per GPU / CPU)")
    ev.add_argument(
        "--ray-timeout",
        type=positive_float,
        default=30.0,
        metavar="S",
        help="seconds to wait for the Ray cluster to answer before giving up (default 30)",
    )


def _teacher_command(commands) -> None:
    tea = commands.add_parser("teacher", help="teacher-forced acc_k and simulated accept length")
    common(tea)
    tea.add_argument("--samples", required=True, help="JSONL samples file")
    tea.add_argument("--limit", type=positive, help="use the first N valid samples")
    setting_flag(tea, "num_steps", help="K: TTT steps to evaluate")
    gate(tea)


def _probe_command(commands) -> None:
    probe = commands.add_parser("probe", help="which aux-layer wiring was the draft trained on?")
    common(probe)
    probe.add_argument(
        "--samples",
        default=default_eval_set(),
        help="JSONL samples file (default: the default pair's eval set)",
    )
    probe.add_argument("--limit", type=positive, default=8, help="use the first N valid samples (default 8)")
    setting_flag(probe, "num_steps", help="K: TTT steps to score")
    probe.add_argument(
        "--budget", type=non_negative, default=40, help="extra candidates the local search may try"
    )
    probe.add_argument(
        "--live",
        type=non_negative,
        default=0,
        metavar="N",
        help="also replay live on the first N samples for the best, declared and runner-up",
    )
    probe.add_argument("--live-tokens", type=positive, default=64)
    probe.add_argument(
        "--via",
        choices=("step", "trace"),
        default="step",
        help="how the --live replays run: step = the best, declared and runner-up, the target verifying "
        "each step; trace = the target once per sample (every layer), then every candidate replayed over "
        "it by the draft alone: each one's exact accept length (docs/traces.md)",
    )
    probe.add_argument("--db", help=KEEP_PROBE_HELP)
    probe.add_argument(
        "--write-fix",
        metavar="DIR",
        help="a DFlash draft: where the probe separates the trained layers from the declared ones, write a copy "
        "of the draft to DIR declaring them (dflash_config.target_layer_ids); an EAGLE-3 draft's fix is "
        "preflight --write-fix DIR --engine ENGINE",
    )


KEEP_PROBE_HELP = (
    "SQLAlchemy URL (default: SPECLENS_DB_URL or sqlite:///data/speclens.db): the wiring probe is kept "
    "there with the pair, and the dashboard's lint, probe tab and Decode use the largest one"
)


def _diagnose_command(commands) -> None:
    diag = commands.add_parser(
        "diagnose", help="why is this draft accepted less than it should be? one verdict"
    )
    common(diag)
    diag.add_argument("--db", help=KEEP_PROBE_HELP)
    diag.add_argument(
        "--samples", help="JSONL samples: with them the probes, the template check and live replays run"
    )
    diag.add_argument("--limit", type=positive, default=8, help="use the first N valid samples (default 8)")
    setting_flag(diag, "num_steps")
    serving = diag.add_mutually_exclusive_group()
    serving.add_argument("--sglang", metavar="CMD", help="the SGLang launch command the draft is served with")
    serving.add_argument("--vllm", metavar="ARGS", help="the vLLM arguments the draft is served with")
    diag.add_argument(
        "--context", type=positive, help="the served context length: checks and an accept-length curve"
    )
    diag.add_argument("--request", metavar="FILE", help=REQUEST_HELP)
    diag.add_argument(
        "--features",
        metavar="FILE",
        help="the draft's own training features (a SpecForge .ckpt): compares what serving feeds with what "
        "training stored, the cheap check that sees the wiring",
    )
    diag.add_argument(
        "--served",
        metavar="FILE_OR_URL",
        help="the server's own numbers (an SGLang log, a vLLM /metrics scrape, or per-request responses: "
        "vLLM, SGLang, llama.cpp timings, ...): its accept length beside the replay's under the wiring the "
        "engine reads and the one the probe finds (needs --samples)",
    )
    diag.add_argument(
        "--live",
        type=non_negative,
        default=2,
        metavar="N",
        help="live replays on the first N samples (default 2)",
    )
    diag.add_argument(
        "--report",
        metavar="FILE",
        help="also write the diagnosis as one file to attach to an issue: the verdict, its findings and "
        "fixes, the probe's table and the first verify steps of the pair's newest run (.html: one page; "
        "else JSON)",
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
    exp.add_argument("--run", type=run_id, required=True, help="run id")
    exp.add_argument("--format", required=True, choices=["csv", "json", "parquet"])
    exp.add_argument("--out", required=True, help="output file")
    exp.add_argument("--db", help="SQLAlchemy URL (default: SPECLENS_DB_URL or sqlite:///data/speclens.db)")
    exp.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _lost_command(commands) -> None:
    lost = commands.add_parser(
        "lost",
        aliases=["where-lost"],  # the page's and the service's name; `lost` stays (the contract)
        help="where stored runs lose acceptance: by draft position, token kind, target confidence, context, "
        "source and span; the draft's calibration and a confidence-threshold what-if (one group per draft)",
    )
    lost.add_argument(
        "--runs",
        type=run_ids,
        required=True,
        help="run ids: an evaluation's or a Compare batch's (e.g. 12-43,50)",
    )
    lost.add_argument(
        "--out", metavar="FILE", help="also write every number as one table: FILE.csv or FILE.parquet"
    )
    lost.add_argument("--db", help="SQLAlchemy URL (default: SPECLENS_DB_URL or sqlite:///data/speclens.db)")
    lost.add_argument("--json", action="store_true", help="print one JSON object on stdout")


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
        type=positive,
        metavar="N",
        help="with --requests: replay the prompts of the N worst requests with --draft at the served K",
    )
    obs.add_argument(
        "--max-new-tokens", type=positive, help="for --replay-worst (default: each request's length)"
    )
    obs.add_argument("--runs", type=run_ids, help="with --export-profile: run ids, comma-separated")
    obs.add_argument(
        "--draft", help="the local copy of the draft the server ran (for the lint and the comparison)"
    )
    obs.add_argument("--target", help="target directory (for the lint, text prompts and --replay-worst)")
    obs.add_argument(
        "--num-speculative-tokens",
        type=positive,
        help="K, for vLLM V0 metrics (no draft count), llama.cpp timings (no step count) or SGLang",
    )
    obs.add_argument("--db", help="SQLAlchemy URL (default: SPECLENS_DB_URL or sqlite:///data/speclens.db)")
    obs.add_argument("--json", action="store_true", help="print one JSON object on stdout")


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
    _lost_command,
    _observe_command,
    serve_check_command,
    lint_command,
)


def program_name() -> str:
    """How the user called the CLI: `speclens` (the console script) or `python -m backend`."""
    return "speclens" if Path(sys.argv[0]).name == "speclens" else "python -m backend"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=program_name(),
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for add_command in PARSERS:
        add_command(commands)
    return parser
