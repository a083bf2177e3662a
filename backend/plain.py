"""Results as small frozen values, written to JSON and read back through one pair of functions.

A result type is a frozen dataclass that subclasses `Plain`. Its fields are the keys of its JSON (the
CLI's `--json`, a stored probe, a task's result): `to_dict` writes them (nested values too), and
`from_dict` reads any such dict back typed, each field by its annotation (a nested result type, a list
or tuple of them, a dict of them, `X | None`). A key the dict lacks takes the field's default (an older
stored result still reads), and so does a null where the field is not optional; keys the type does
not declare are left out. A field whose JSON key is not a Python name ("class") says so with
`field(metadata={KEY: "class"})`; working state the JSON leaves out (a tensor) says
`field(metadata={OMIT: True})`, and a value computed from the fields that the JSON also carries is a
property named in the class's `DERIVED`. A database column any earlier version wrote is read with
`from_stored`, which never refuses: a value that cannot be read as its field's kind takes the default.

Torch-free: the pages import it.
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from functools import cache

KEY = "json_key"  # field metadata: the JSON key where it is not the field's name
OMIT = "json_omit"  # field metadata: working state (tensors) the JSON leaves out


class Plain:
    """A dataclass mixin: one `to_dict` and one `from_dict` (see the module)."""

    DERIVED: typing.ClassVar[tuple[str, ...]] = ()  # properties written after the fields, never read back

    def to_dict(self) -> dict:
        out = {_key(f): plain(getattr(self, f.name)) for f in fields(self) if not f.metadata.get(OMIT)}
        return out | {name: plain(getattr(self, name)) for name in self.DERIVED}

    @classmethod
    def from_dict(cls, raw):
        """`raw` read as this type (an instance of it is returned as it is)."""
        if isinstance(raw, cls):
            return raw
        if not isinstance(raw, dict):
            raise TypeError(f"{cls.__name__}: expected a JSON object, got {type(raw).__name__}")
        hints = _hints(cls)
        values = {}
        for f in fields(cls):
            key, defaulted = _key(f), f.default is not MISSING or f.default_factory is not MISSING
            if key in raw and not (raw[key] is None and defaulted and not _optional(hints[f.name])):
                values[f.name] = read(hints[f.name], raw[key])
            elif not defaulted:
                raise ValueError(f"{cls.__name__}: the JSON has no {key!r}")
        return cls(**values)

    @classmethod
    def from_stored(cls, raw):
        """`raw` read leniently, as a database column written by any earlier version: each field
        from `raw` where it is there and can be read as its default's kind, else its default."""
        raw = raw if isinstance(raw, dict) else {}
        return cls(**{f.name: _typed(raw.get(_key(f)), f) for f in fields(cls)})


def plain(value):
    """`value` as JSON-ready data: result types (and any dataclass with `to_dict`) written out, tuples as
    lists."""
    if isinstance(value, Plain) or (is_dataclass(value) and hasattr(value, "to_dict")):
        return value.to_dict()
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def read(hint, value):
    """`value` read as the annotation `hint` (see the module); values of other kinds are kept as they are."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        return read(kinds[0], value) if len(kinds) == 1 else value
    if origin is list and args and isinstance(value, list | tuple):
        return [read(args[0], v) for v in value]
    if origin is tuple and args and isinstance(value, list | tuple):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(read(args[0], v) for v in value)
        return tuple(read(a, v) for a, v in zip(args, value, strict=False))
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return {k: read(args[1], v) for k, v in value.items()}
    if isinstance(hint, type) and issubclass(hint, Plain):
        return hint.from_dict(value)
    return value


def _typed(value, f):
    """A stored value for dataclass field `f`: of the field's kind, else its default."""
    default = f.default if f.default_factory is MISSING else f.default_factory()
    if default is None and value is not None:  # an optional number: "int | None", "float | None"
        kind = next((k for k in (int, float) if f.type.startswith(k.__name__)), None)
        try:
            return value if kind is None else kind(value)
        except (TypeError, ValueError, OverflowError):
            return None
    return like(value, default)


def like(value, default):
    """`value` coerced to the kind of `default` (None or unreadable: the default)."""
    if value is None:
        return default
    try:
        if isinstance(default, bool):
            return bool(value)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
        if isinstance(default, tuple):
            return tuple(value)
        if isinstance(default, dict):
            return dict(value)
        if isinstance(default, str):
            return str(value)
    except (TypeError, ValueError, OverflowError):
        return default
    return value


def _optional(hint) -> bool:
    """Whether the annotation admits None (`X | None`, `Optional[X]`, `Any`)."""
    if hint is typing.Any:
        return True
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def _key(f) -> str:
    return f.metadata.get(KEY, f.name)


@cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)
