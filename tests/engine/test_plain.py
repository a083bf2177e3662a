"""backend/plain.py: results written to JSON and read back typed through one pair of functions."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from backend.plain import KEY, Plain


@dataclass(frozen=True)
class Inner(Plain):
    name: str
    cls: str = field(default="", metadata={KEY: "class"})


@dataclass(frozen=True)
class Outer(Plain):
    items: list[Inner]
    best: Inner | None = None
    wiring: tuple[int, ...] = ()
    by_name: dict[str, Inner] = field(default_factory=dict)
    note: str = ""


def test_a_result_round_trips_with_its_json_keys():
    raw = {
        "items": [{"name": "a", "class": "wiring"}],
        "best": {"name": "b", "class": ""},
        "wiring": [0, 2, 15],
        "by_name": {"x": {"name": "x", "class": "vocab"}},
        "note": "n",
    }
    value = Outer.from_dict(raw)
    assert value.items[0].cls == "wiring" and value.best.name == "b"
    assert value.wiring == (0, 2, 15) and value.by_name["x"].cls == "vocab"
    assert value.to_dict() == raw


def test_an_older_result_reads_with_defaults_and_a_missing_required_key_is_named():
    value = Outer.from_dict({"items": [], "retired_key": 1, "note": None, "by_name": None})
    assert value.best is None and value.wiring == () and value.note == "" and value.by_name == {}
    with pytest.raises(ValueError, match="Outer: the JSON has no 'items'"):
        Outer.from_dict({"note": "x"})
    with pytest.raises(TypeError, match="expected a JSON object"):
        Outer.from_dict([1])
