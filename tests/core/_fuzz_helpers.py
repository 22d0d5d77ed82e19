"""Hypothesis strategies shared by the loader fuzz tests: junk values, real field names,
and random edits of a valid document (so the fuzzer gets past the first unknown key and
reaches the cross-field checks deep inside a spec)."""
from __future__ import annotations

import copy
import dataclasses
import functools
import typing
from enum import Enum
from typing import Any

from hypothesis import strategies as st

from yatt.core.errors import InputError
from yatt.core.plan import Plan
from yatt.core.trace import SampleRecord, SpanRecord, TraceMeta


@functools.lru_cache(maxsize=None)
def field_names() -> tuple[str, ...]:
    """Every field name of every spec reachable from Plan and the trace records."""
    seen: set[type] = set()
    names: set[str] = set()
    enum_values: set[str] = set()

    def walk(tp: Any) -> None:
        for arg in typing.get_args(tp):
            walk(arg)
        if isinstance(tp, type) and issubclass(tp, Enum):
            enum_values.update(str(m.value) for m in tp)
        if isinstance(tp, type) and dataclasses.is_dataclass(tp) and tp not in seen:
            seen.add(tp)
            hints = typing.get_type_hints(tp)
            for f in dataclasses.fields(tp):
                names.add(f.name)
                walk(hints[f.name])

    for cls in (Plan, TraceMeta, SampleRecord, SpanRecord):
        walk(cls)
    return tuple(sorted(names)) + tuple(sorted(enum_values))


WORDS = st.sampled_from(["kind", "meta", "sample", "span", "yatt.trace/1", "yatt.trace/0",
                         "H100-SXM", "cpu-local", "Qwen2.5-0.5B", "Qwen2.5-1.5B", "nope.yaml",
                         "", " ", "a" * 300 + ".yaml", "x\x00y", "é", "1e9"])
NUMBERS = st.one_of(
    st.integers(-3, 70),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2**53, 2**63 - 1, 2**63, -(2**63) - 1, 1e308, 5e-324, 0.5, 1.5]),
)


def junk() -> st.SearchStrategy[Any]:
    """Any plain YAML/JSON value, nested a little, keys often real field names."""
    keys = st.one_of(st.sampled_from(field_names()), st.text(max_size=6))
    scalars = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=12), WORDS,
                        st.sampled_from(field_names()))
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=12)


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def mutated(draw, base: Any, max_edits: int = 3) -> Any:
    """`base` with 1..max_edits random edits: replace a value, delete a key, add a key
    (a real field name or junk), or drop/duplicate a list item."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, max_edits))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        parent, key = None, None
        target = doc
        for p in path:
            parent, key, target = target, p, target[p]
        op = draw(st.sampled_from(["replace", "replace", "delete", "add", "dup"]))
        if op == "replace" or parent is None and op == "delete":
            value = draw(junk())
            if parent is None:
                doc = value
            else:
                parent[key] = value
        elif op == "delete":
            del parent[key]
        elif op == "add" and isinstance(target, dict):
            target[draw(st.one_of(st.sampled_from(field_names()), st.text(max_size=6)))] = draw(junk())
        elif op == "dup" and isinstance(target, list) and target:
            i = draw(st.integers(0, len(target) - 1))
            target.insert(i, copy.deepcopy(target[i]))
        elif op == "dup" and isinstance(parent, list):
            parent.remove(target)
    return doc


def assert_one_line(e: InputError) -> None:
    text = str(e)
    assert "\n" not in text and "\r" not in text, repr(text)
    assert len(text) < 2000, len(text)
