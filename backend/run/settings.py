"""What one field of a `ReplayRequest` (backend/run/request.py) is: its role, its check, its CLI flag
and its Decode widget (`Setting`, declared with `setting(...)`), and the checks and parsers the fields
use. The CLI's flags (backend/cli/flags.py) and the Decode form (ui/decode/form.py) are built from them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from backend import BadInput

ROLES = ("pair", "prompt", "decides", "placement")  # placement: where it runs, matched apart


@dataclass(frozen=True)
class Widget:
    """How the Decode form asks for a setting (ui/decode/form.py builds it)."""

    kind: str  # number | text | select | checkbox
    label: str
    row: str = "main"  # main | tree | sampling: which row of the Decode form
    low: float | None = None
    high: float | None = None
    widget_value: object = None  # the form's default (None: the field's)
    step: float | None = None
    none_at: object = None  # a number widget's value that means None (num_draft_tokens 0)
    range: str | None = None  # the help's words for what the setting's check accepts (else low to high)


@dataclass(frozen=True)
class Setting:
    """What one request field is: its role, its check, its CLI flag and its Decode widget."""

    role: str
    check: Callable[[object], None] | None = None  # raises BadInput
    flag: str | None = None  # the CLI flag, e.g. --steps (None: no flag is built for it)
    group: str | None = None  # which flag group adds it: common | decoding | tree | dispatch
    parse: Callable[[str], object] | None = None  # the flag's text -> value (None: a switch)
    help: str = ""
    choices: tuple | None = None
    widget: Widget | None = None


def setting(default, role: str = "decides", **kw):
    return field(default=default, metadata={"setting": Setting(role, **kw)})


def _between(name: str, low, high, optional: bool = False):
    def check(value) -> None:
        if value is None and optional:
            return
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
            raise BadInput(f"{name} must be in {low}..{high}, got {value}")

    return check


def _one_of(name: str, choices):
    def check(value) -> None:
        if value not in choices:
            raise BadInput(f"unknown {name} {value!r}; use one of {', '.join(map(str, choices))}")

    return check


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BadInput(f"expected an integer, got {text!r}") from None


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadInput(f"not a number: {text!r}") from None
    return value


def _temperature(value) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise BadInput(f"temperature must be a number >= 0, got {value}")


def _top_p(value) -> None:
    if not (math.isfinite(value) and 0 < value <= 1):
        raise BadInput(f"top_p must be in (0, 1], got {value}")


def _top_k(value) -> None:
    if value < -1:
        raise BadInput(f"top_k must be >= 1, or 0 / -1 for every token, got {value}")
