"""Strict YAML text parsing shared by configs, plans, profiles and the catalogs.

Why: every YAML document yatt reads goes through one loader: safe (no tags), strict about
duplicate keys, YAML-1.2-like about floats such as `1e9`, and turning anything the text
can make PyYAML raise into a one-line `InputError`.
"""
from __future__ import annotations

import re
from typing import Any

import yaml

from .errors import InputError

class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e9` / `1.5e-6` as floats (YAML 1.1 wants `1.0e+9`)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def _mapping_no_duplicates(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    """A mapping whose keys are unique: PyYAML would silently keep the last duplicate,
    so `tp: 1` then `tp: 8` in one block would be read as 8 without a word."""
    loader.flatten_mapping(node)
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            dup = key in seen
        except TypeError:  # unhashable key: let the default constructor report it
            break
        if dup:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {seen[key] + 1})",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_no_duplicates)


class YamlInputError(InputError, yaml.YAMLError):
    """Bad YAML text: an `InputError` (one line, exit 2) that is also a `yaml.YAMLError`,
    so code written against PyYAML's error type keeps working."""


def parse_yaml(text: str, file: str = "") -> Any:
    """YAML text to plain data; any problem with the text is an `InputError`.

    Besides syntax errors this covers what PyYAML raises on hostile text outside its own
    error type: ints past Python's digit limit and impossible dates (ValueError), `!!int ''`
    (IndexError), nesting deeper than the parser can recurse (RecursionError). Parsing only
    reads `text`, so whatever it raises is a fault of the text, never of yatt."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise YamlInputError(f"invalid YAML: {problem}", field=where, file=file) from None
    except RecursionError:
        raise YamlInputError("invalid YAML: nested too deeply", file=file) from None
    except Exception as e:  # noqa: BLE001 - see the docstring
        raise YamlInputError(f"invalid YAML value: {_why(e)}", file=file) from None


def _why(e: Exception) -> str:
    """A short reason for an exception raised while parsing."""
    text = str(e).splitlines()[0] if str(e).strip() else type(e).__name__
    if "integer string conversion" in text:
        return "an integer with more than 4300 digits"
    return text[:120]
