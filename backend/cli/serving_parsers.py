"""The parsers of the commands that face a serving engine: serve-check (a server against the replay) and
lint (a serving command against the draft)."""

from __future__ import annotations

from backend.cli.flags import (
    common,
    positive,
    positive_float,
    setting_flag,
)

REQUEST_HELP = (
    "request bodies as sent (a JSON object, a list, or JSONL; OpenAI or SGLang /generate): "
    "penalties, grammar and adapters they ask for are checked"
)


def serve_check_command(commands) -> None:
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
        help="with --engine vllm or llamacpp: start that engine here on 127.0.0.1 with the pair, check, stop it",
    )
    check.add_argument(
        "--via",
        choices=("step", "trace"),
        default="step",
        help="the replay the server is held against: step (the target loaded here verifies each step) or "
        "trace (over traces of every layer; with --engine vllm captured by vLLM itself: a second vLLM "
        "launched here with the hidden-states method, or --trace-url; docs/traces.md)",
    )
    check.add_argument(
        "--trace-url",
        help="with --via trace --engine vllm: a vLLM serving the target with the extract_hidden_states method "
        "(every layer, 0..L) instead of launching one",
    )
    check.add_argument(
        "--server-log",
        metavar="FILE",
        help="with --engine llamacpp --url: the server's log (LLAMA_TRACE=1, -np 1): its per-step counts",
    )
    check.add_argument(
        "--llamacpp",
        metavar="DIR",
        help="the llama.cpp build (default: SPECLENS_LLAMACPP or .llamacpp, made by scripts/install-llamacpp.sh)",
    )
    check.add_argument(
        "--threads", type=positive, help="llama-server's -t (default: SPECLENS_LLAMACPP_THREADS or 1)"
    )
    check.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more llama-server flag, repeatable; a flag that starts with - goes as --server-arg=--no-repack",
    )
    check.add_argument(
        "--target-gguf",
        metavar="FILE",
        help="with --engine llamacpp --launch: a GGUF of the target (e.g. quantized) served after the "
        "converted F32 target, on the same prompts: what its quantization costs in accept length",
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
    check.add_argument("--limit", type=positive, default=8, help="the first N valid samples (default 8)")
    setting_flag(check, "num_steps", help="K the server runs (chain: num_steps)")
    check.add_argument("--topk", type=positive, help="the server's --speculative-eagle-topk (default 1)")
    check.add_argument(
        "--num-draft-tokens", type=positive, help="the server's --speculative-num-draft-tokens (trees)"
    )
    check.add_argument("--max-new-tokens", type=positive, default=128)
    sampled = (
        "sent to the server; a sampled answer is replayed along the tokens it emitted (the drafts greedy)"
    )
    setting_flag(check, "temperature", help=f"the request's temperature (default 0: greedy), {sampled}")
    setting_flag(check, "top_p", help="the sampled request's top_p")
    setting_flag(check, "top_k", help="the sampled request's top_k (0: every token)")
    setting_flag(check, "seed", help="the seed of prompt 0's sampled request; prompt i gets seed + i")
    check.add_argument(
        "--timeout",
        type=positive_float,
        default=60.0,
        metavar="S",
        help="seconds to wait for each answer; the first request without one ends the run (default 60)",
    )
    check.add_argument("--db", help="SQLAlchemy URL (default: SPECLENS_DB_URL or sqlite:///data/speclens.db)")


def lint_command(commands) -> None:
    lint = commands.add_parser("lint", help="check SGLang/vLLM/llama.cpp serving flags against a draft")
    lint.add_argument("--draft", help="the draft directory (default: the path in the command line)")
    lint.add_argument(
        "--target",
        help="target directory, for its architecture, depth and context "
        "(default: the command's --model-path when it is a local directory)",
    )
    engine = lint.add_mutually_exclusive_group(required=True)
    engine.add_argument("--sglang", help="an SGLang launch command (python -m sglang.launch_server ...)")
    engine.add_argument("--vllm", help="vLLM arguments (vllm serve ... --speculative-config '{...}')")
    engine.add_argument(
        "--llamacpp",
        help="a llama-server command (llama-server -m T.gguf -md D.gguf --spec-type draft-eagle3 ...); "
        "--draft and --target name the Hugging Face directories the GGUFs were converted from (default: "
        "the bundled pair, as for every command that loads one)",
    )
    lint.add_argument("--request", metavar="FILE", help=REQUEST_HELP)
    lint.add_argument(
        "--db",
        help="SQLAlchemy URL (default: SPECLENS_DB_URL or sqlite:///data/speclens.db): a wiring probe and "
        "greedy chain runs of this draft stored there shape the fixes, as on the Diagnostics page",
    )
    lint.add_argument(
        "--fail-on",
        choices=("error", "warning"),
        help="exit 3 (as a failed gate) when a finding is at least this severe, to gate a CI job on the "
        "lint (default: exit 0 whatever it finds)",
    )
    lint.add_argument("--json", action="store_true", help="print one JSON object on stdout")
