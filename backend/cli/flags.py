"""The CLI's flags: value parsers, the flag groups commands share, and the parser that fails in one line."""

from __future__ import annotations

import argparse

from backend import BadInput
from backend.defaults import default_draft, default_target
from backend.engine.readings import ENGINES


def aux_indices_arg(text: str) -> tuple[int, ...]:
    from backend.engine.wiring import parse_aux_indices

    try:
        return parse_aux_indices(text)
    except BadInput as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def steps_arg(text: str) -> int:
    """K: 1..MAX_STEPS, as a replay request takes it (a teacher or probe run of K = 1000 would
    run for minutes per sample before anything said so)."""
    from backend.service.requests import MAX_STEPS

    value = positive(text)
    if value > MAX_STEPS:
        raise argparse.ArgumentTypeError(f"must be in 1..{MAX_STEPS}, got {value}")
    return value


def utf8_text(text: str) -> str:
    """Command-line text must be UTF-8 (bytes that are not arrive as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError("not UTF-8 text") from None
    return text


def run_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected run ids like 3,4,5, got {text!r}") from None
    if not ids or any(i < 1 for i in ids):
        raise argparse.ArgumentTypeError(f"expected run ids >= 1, got {text!r}")
    return ids


def finite_number(text: str) -> float:
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
    sub.add_argument("--steps", type=steps_arg, default=4, help="K: draft tokens per verify step")
    sub.add_argument("--max-new-tokens", type=positive, default=128)

    tree = sub.add_argument_group("trees and sampling (SGLang's flags and rules, docs/reference.md §12)")
    tree.add_argument(
        "--topk",
        type=positive,
        help="children per frontier node (SGLang --speculative-eagle-topk; default 1: a chain)",
    )
    tree.add_argument(
        "--num-draft-tokens",
        type=positive,
        help="tokens verified per step, the root included (SGLang --speculative-num-draft-tokens; "
        "topk 1 forces steps + 1)",
    )
    tree.add_argument("--temperature", type=finite_number, default=0.0, help="0 (default): greedy")
    tree.add_argument("--top-p", type=finite_number, default=1.0)
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
# names (K is --steps: num_steps); replay and evaluate read them from the flags through request_fields.
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


def request_fields(args) -> dict:
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
        "--aux-hf-indices", type=aux_indices_arg, help="override wiring: three HF hidden_states indices"
    )
    sub.add_argument(
        "--engine",
        default="auto",
        choices=["auto", *ENGINES],
        help="read and run the draft as this engine does (wiring, variant flags, embedding); "
        "auto = the reading of the tool that trained it (docs/reference.md §10)",
    )


def gate(sub) -> None:
    sub.add_argument(
        "--min-accept-length",
        type=finite_number,
        metavar="X",
        help="CI gate: exit 3 when the accept length (incl. bonus) is below X; for teacher the "
        "predicted accept length 1 + simulated accept length is compared",
    )
