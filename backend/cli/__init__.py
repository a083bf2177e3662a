"""SpecLens CLI, `python -m backend <command>`: the contract is parsers.DESCRIPTION; one module a
command family (pair, data, serving), their flags (flags, parsers) and what they print (render)."""

from __future__ import annotations

import json
import os
import signal
import sys

from sqlalchemy.exc import SQLAlchemyError

from backend import BadInput, Terminated, first_line
from backend.cli.data import cmd_export, cmd_import, cmd_lost
from backend.cli.pair import cmd_diagnose, cmd_evaluate, cmd_probe, cmd_replay, cmd_teacher
from backend.cli.parsers import build_parser
from backend.cli.preflight import cmd_preflight
from backend.cli.render import fmt
from backend.cli.serving import cmd_lint, cmd_observe, cmd_serve_check
from backend.defaults import active_pair, default_target

GATE_FAILED = 3  # exit code: --min-accept-length not met


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
    "lost": cmd_lost,
    "where-lost": cmd_lost,  # lost's alias
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
    if not isinstance(error, SQLAlchemyError | OSError | RecursionError):
        return None
    from backend.service.database import refusal

    return refusal(error, url)


def _fallback_note(args) -> None:
    """A command that ran on the defaults while the real pair is not set up says what it ran on."""
    fallback = active_pair().fallback
    if (
        fallback
        and not os.environ.get("SPECLENS_TARGET")
        and getattr(args, "target", None) == default_target()
    ):
        print(f"note: using the toy demo pair: {fallback}", file=sys.stderr)


def gate_value(args, result: dict) -> tuple[str, float | None] | None:
    if getattr(args, "min_accept_length", None) is None:
        return None
    if args.command == "teacher":
        simulated = result["simulated_accept_length"]
        return "predicted accept length (1 + simulated)", None if simulated is None else 1 + simulated
    return "accept length", result["mean_accept_length"]


LINT_SEVERITIES = {"error": ("error",), "warning": ("error", "warning")}


def lint_gate(args, result: dict) -> str | None:
    """`lint --fail-on`: what failed it (the findings at least that severe), None when it passes."""
    level = getattr(args, "fail_on", None) if args.command == "lint" else None
    if not level:
        return None
    codes = [f["code"] for f in result["findings"] if f["severity"] in LINT_SEVERITIES[level]]
    return f"{len(codes)} finding(s) at --fail-on {level} or worse: {', '.join(codes)}" if codes else None


def main(argv: list[str] | None = None) -> int:
    # transformers' own bars ("Loading weights") would come between a command's bar and its one line of
    # error on stderr; the commands show their own progress. HF_HUB_DISABLE_PROGRESS_BARS=0 brings them back.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1":
        sys.modules["transformers"].utils.logging.disable_progress_bar()  # read at its import: too late
    args = build_parser().parse_args(argv)
    if getattr(args, "db", None) == "":  # an unset shell variable: not the default database
        print("error: --db '': an empty database URL (leave --db out for the default)", file=sys.stderr)
        return 2
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
    failed_on = lint_gate(args, result)
    if failed_on:
        print(f"gate failed: {failed_on}", file=sys.stderr)
        return GATE_FAILED
    checked = gate_value(args, result)
    if checked is not None:
        name, value = checked
        if value is None or value < args.min_accept_length:
            print(
                f"gate failed: {name} {fmt(value)} < --min-accept-length {args.min_accept_length}",
                file=sys.stderr,
            )
            return GATE_FAILED
        print(f"gate passed: {name} {fmt(value)} >= {args.min_accept_length}", file=sys.stderr)
    _fallback_note(args)  # last, and only on success: a refusal stays one line
    return 0
