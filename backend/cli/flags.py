"""The CLI's flags: value parsers, the flag groups commands share, and the parser that fails in one line."""

from __future__ import annotations

import argparse

from backend import BadInput
from backend.defaults import default_draft, default_target
from backend.run.request import settings_of


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


MAX_ID = 2**63 - 1  # SQLite's and PostgreSQL's largest integer key


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def run_id(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_ID:
        raise argparse.ArgumentTypeError(f"a run id is 1 to {MAX_ID}, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def utf8_text(text: str) -> str:
    """Command-line text must be UTF-8 (bytes that are not arrive as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError("not UTF-8 text") from None
    return text


def run_ids(text: str) -> list[int]:
    """Run ids, comma-separated, each an id or a range (3,4,5 or 12-43,50)."""
    ids = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            low, dash, high = part.partition("-")
            if dash and not high:  # "1-" is a cut range, not run 1
                raise ValueError
            first, last = int(low), int(high or low)
            if last < first or last - first > 100_000:  # 5-3 is a typo, not "none"
                raise ValueError
            ids.extend(range(first, last + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected run ids like 3,4,5 or 12-43, got {text!r}") from None
    if not ids or any(not 1 <= i <= MAX_ID for i in ids):
        raise argparse.ArgumentTypeError(f"expected run ids 1 to {MAX_ID}, got {text!r}")
    return ids


def finite_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def setting_flag(sub, name: str, **overrides) -> None:
    """One ReplayRequest setting as a flag, built from its field (backend/run/request.py `Setting`):
    its flag, default, check and help; `overrides` (a command's own help or default) on top."""
    meta, default = next((m, d) for n, m, d in settings_of() if n == name)
    kwargs = {"default": default, "help": meta.help or None}
    if meta.parse is None:
        kwargs["action"] = "store_true"
    elif meta.choices:
        kwargs["choices"] = list(meta.choices)
    else:
        kwargs["type"] = _flag_type(meta)
    sub.add_argument(meta.flag, **(kwargs | overrides))


def setting_flags(sub, group: str, title: str | None = None) -> None:
    """Every ReplayRequest setting of `group` (common | decoding | tree | dispatch) as flags."""
    into = sub.add_argument_group(title) if title else sub
    for name, meta, _ in settings_of():
        if meta.group == group and meta.flag is not None:
            setting_flag(into, name)


def _flag_type(meta):
    """The flag's text through the setting's parser and its check: a bad value is argparse's one line."""

    def convert(text: str):
        try:
            value = meta.parse(text)
            if meta.check is not None:
                meta.check(value)
        except BadInput as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return value

    return convert


def decoding_flags(sub) -> None:
    """K, trees and sampling: the flags every replaying command shares."""
    setting_flags(sub, "decoding")
    setting_flags(sub, "tree", "trees and sampling (SGLang's flags and rules, docs/reference.md §12)")
    setting_flags(sub, "source", "the target's side: a forward per step, or a trace per sample")


def dispatch_flags(sub) -> None:
    """A target split across devices (accelerate's big-model dispatch, backend/target/dispatch.py)."""
    setting_flags(sub, "dispatch", "targets across devices")


def _dest(meta) -> str:
    return meta.flag.lstrip("-").replace("-", "_")


def request_fields(args) -> dict:
    """The ReplayRequest settings the flags give (every setting that has a flag on this command)."""
    return {
        name: getattr(args, _dest(meta))
        for name, meta, _ in settings_of()
        if meta.flag is not None and hasattr(args, _dest(meta))
    }


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
    setting_flags(sub, "common")


def gate(sub) -> None:
    sub.add_argument(
        "--min-accept-length",
        type=finite_number,
        metavar="X",
        help="CI gate: exit 3 when the accept length (incl. bonus) is below X; for teacher the "
        "predicted accept length 1 + simulated accept length is compared",
    )
