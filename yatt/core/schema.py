"""Strict conversion between plain dicts (YAML/JSON) and frozen dataclasses.

Why: configs, plans and trace metadata all cross package and process boundaries as
frozen dataclasses. One generic, strict converter gives every one of them the same
behaviour: unknown keys, wrong types, out-of-range values and missing fields raise an
`InputError` naming the field path and what is allowed, and `to_dict(from_dict(x)) == x`.

Constraints live in field metadata, built with `spec_field(...)`:
    tp: int = spec_field(1, ge=1, help="tensor-parallel size")
"""
from __future__ import annotations

import dataclasses
import math
import reprlib
import types
import typing
from enum import Enum
from typing import Any, Mapping, TypeVar, Union

from .errors import InputError

T = TypeVar("T")
_MISSING = dataclasses.MISSING
INT_LIMIT = 2**63  # ints must fit in int64: numpy, JSON consumers and the simulator assume it


class _Short(reprlib.Repr):
    """A bounded repr: hostile values (huge, deeply nested, self-referencing, aliased a
    billion times) must not make an error message long, slow or crash."""

    def repr_int(self, x: int, level: int) -> str:
        if abs(x) >= 10**30:
            return f"an integer of about {int(x.bit_length() * 0.30103)} digits"
        return repr(x)


_SHORT = _Short()
_SHORT.maxstring = 60
_SHORT.maxother = 60
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = _SHORT.maxdict = 4
_SHORT.maxlevel = 2


def show(value: Any) -> str:
    """`repr(value)`, cut short for error messages."""
    try:
        return _SHORT.repr(value)
    except Exception:  # a repr that fails must not hide the real error
        return f"a {type(value).__name__}"


def spec_field(default: Any = _MISSING, *, ge: float | None = None, gt: float | None = None,
               le: float | None = None, lt: float | None = None, help: str = "",
               default_factory: Any = _MISSING, omit_none: bool = False) -> Any:
    """A dataclass field with range constraints checked by `from_dict` and `check_ranges`.

    omit_none: `to_dict` leaves the field out while it is None (an optional section that
    most files do not carry, e.g. a plan's `predicted:`)."""
    meta = {"ge": ge, "gt": gt, "le": le, "lt": lt, "help": help, "omit_none": omit_none}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is type(None):
        return "null"
    if isinstance(tp, type) and issubclass(tp, Enum):
        return "one of " + "|".join(str(m.value) for m in tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return "a mapping"
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        return "a list"
    if origin is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _range_text(meta: Mapping[str, Any]) -> str:
    bits = []
    for key, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if meta.get(key) is not None:
            bits.append(f"{sym} {meta[key]:g}")
    return " and ".join(bits)


def _key(k: Any) -> str:
    """A mapping key as a field-path segment (bounded, so junk keys keep the line short)."""
    plain = isinstance(k, str) and 0 < len(k) <= 60 and k.isprintable() and k.strip() == k
    return k if plain else show(k)


def _check_range(value: Any, meta: Mapping[str, Any], field: str) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    ok = True
    if meta.get("ge") is not None and not value >= meta["ge"]:
        ok = False
    if meta.get("gt") is not None and not value > meta["gt"]:
        ok = False
    if meta.get("le") is not None and not value <= meta["le"]:
        ok = False
    if meta.get("lt") is not None and not value < meta["lt"]:
        ok = False
    if value != value:  # NaN
        ok = False
    if not ok:
        raise InputError(f"got {show(value)}; allowed: a number {_range_text(meta)}", field=field)


def _convert(tp: Any, value: Any, field: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, field)
            except InputError as e:
                errors.append(e)
        if len(errors) == 1:
            raise errors[0]
        raise InputError(f"got {show(value)}; allowed: {_type_name(tp)}", field=field)
    if tp is type(None):
        if value is not None:
            raise InputError(f"got {show(value)}; allowed: null", field=field)
        return None
    if isinstance(tp, type) and issubclass(tp, Enum):
        try:
            return tp(value)
        except (ValueError, TypeError):
            raise InputError(f"got {show(value)}; allowed: {_type_name(tp)}", field=field) from None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return from_dict(tp, value, _path=field)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise InputError(f"got {type(value).__name__} {show(value)}; allowed: a list", field=field)
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{field}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise InputError(f"got {len(value)} items; allowed: exactly {len(args)}", field=field)
        return tuple(_convert(a, v, f"{field}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise InputError(f"got {type(value).__name__}; allowed: a mapping", field=field)
        kt, vt = typing.get_args(tp)
        return {_convert(kt, k, f"{field}.{_key(k)}"): _convert(vt, v, f"{field}.{_key(k)}")
                for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise InputError(f"got {show(value)}; allowed: true|false", field=field)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
                return int(value)
            raise InputError(f"got {show(value)}; allowed: an integer", field=field)
        if not -INT_LIMIT <= value < INT_LIMIT:
            raise InputError(f"got {show(value)}; allowed: an integer in [-2**63, 2**63)", field=field)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"got {show(value)}; allowed: a number", field=field)
        try:
            out = float(value)
        except OverflowError:  # an int too large for a float
            out = math.inf
        if not math.isfinite(out):
            raise InputError(f"got {show(value)}; allowed: a finite number", field=field)
        return out
    if tp is str:
        if not isinstance(value, str):
            raise InputError(f"got {show(value)}; allowed: a string", field=field)
        return value
    raise TypeError(f"schema: unsupported field type {tp!r} at {field}")  # programming error


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_dict(cls: type[T], data: Any, *, _path: str = "") -> T:
    """Build a frozen dataclass from a mapping, strictly.

    Raises InputError(field=path) for unknown keys, missing required keys, wrong
    types and values outside the declared ranges. Cross-field checks run in the
    dataclass's own `__post_init__` and may raise InputError too.
    """
    if data is None:
        raise InputError("got null (an empty value or document); allowed: a mapping", field=_path)
    if not isinstance(data, Mapping):
        raise InputError(f"got {type(data).__name__} {show(data)}; allowed: a mapping", field=_path)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = _hints(cls)
    unknown = [k for k in data if k not in fields]
    if unknown:
        k = unknown[0]
        where = f"{_path}.{_key(k)}" if _path else _key(k)
        raise InputError(f"unknown key; allowed keys: {', '.join(sorted(fields))}", field=where)
    kwargs = {}
    for name, f in fields.items():
        where = f"{_path}.{name}" if _path else name
        if name not in data:
            if f.default is _MISSING and f.default_factory is _MISSING:
                raise InputError(f"missing required field ({_type_name(hints[name])})", field=where)
            continue
        value = _convert(hints[name], data[name], where)
        _check_range(value, f.metadata, where)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except InputError as e:
        raise e.within(prefix=_path) from None


def check_ranges(obj: Any) -> None:
    """Check the declared ranges of an already-built dataclass (for Python-built specs)."""
    for f in dataclasses.fields(obj):
        _check_range(getattr(obj, f.name), f.metadata, f.name)


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return value.item()
    return value


def to_dict(obj: Any) -> dict[str, Any]:
    """Plain-data form of a dataclass (enums as values, tuples as lists)."""
    return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)
            if f.init and not (f.metadata.get("omit_none") and getattr(obj, f.name) is None)}
