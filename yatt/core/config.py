"""Load experiment configs and plans from YAML, strictly; write them back atomically.

Why: one place turns files into validated specs. An experiment file may name its parts
by catalog name (`actor: Qwen2.5-1.5B`), by a path relative to itself
(`cluster: cluster/a100-80g-6x8.yaml`), or inline. Every failure is an `InputError` that
names the file and the field path.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable

import yaml

from . import catalog
from .errors import InputError
from .plan import Experiment, Plan
from .schema import from_dict, show, to_dict

_YAML_SUFFIXES = (".yaml", ".yml")


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


def read_yaml(path: str | Path) -> Any:
    """Read and parse a YAML file; a missing, unreadable or non-UTF-8 file is an `InputError`."""
    path = Path(path)
    try:
        if not path.exists():
            raise InputError("no such file", file=str(path))
        if not path.is_file():
            raise InputError("not a file", file=str(path))
        raw = path.read_bytes()
    except OSError as e:  # permissions, a name too long, ...
        raise InputError(f"cannot read: {e.strerror or e}", file=str(path)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"not a UTF-8 text file (byte {e.start})", file=str(path)) from None
    return parse_yaml(text, file=str(path))


def _mapping(data: Any, file: Path, field: str = "") -> dict[str, Any]:
    if data is None:
        raise InputError("empty document; allowed: a mapping", field=field, file=str(file))
    if not isinstance(data, dict):
        raise InputError(f"got a {type(data).__name__}; allowed: a mapping", field=field,
                         file=str(file))
    return data


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long, an embedded NUL, ...
        return False


def _ref(value: Any, base: Path, field: str, by_name: Callable[[str], Any],
         expand: Callable[[dict, Path], dict] | None = None) -> tuple[Any, Path]:
    """Resolve a catalog name, a relative YAML path, or an inline mapping to a mapping."""
    if isinstance(value, str):
        if value.endswith(_YAML_SUFFIXES):
            path = (base / value) if not os.path.isabs(value) else Path(value)
            if not _is_file(path):
                raise InputError(f"file {show(value)} not found (looked in {show(str(path.parent))})",
                                 field=field)
            data = _mapping(read_yaml(path), path)
            return (expand(data, path.parent) if expand else data), path
        try:
            return by_name(value), base
        except InputError as e:
            raise e.within(prefix=field) from None
    return value, base


def _model_dict(value: Any, base: Path, field: str) -> Any:
    def by_name(n: str) -> dict:
        return to_dict(catalog.model(n))
    data, src = _ref(value, base, field, by_name)
    if isinstance(data, dict) and isinstance(data.get("hf_path"), str) and data["hf_path"]:
        p = data["hf_path"]
        if not os.path.isabs(p):
            data = {**data, "hf_path": str((src if src.is_dir() else src.parent) / p)}
    return data


def _cluster_dict(data: dict, base: Path) -> dict:
    """A cluster's `gpu` may be a catalog name or a path to a GPU .yaml (relative to `base`)."""
    if "gpu" in data:
        gpu, _ = _ref(data["gpu"], base, "gpu", lambda n: to_dict(catalog.gpu(n)))
        data = {**data, "gpu": gpu}
    return data


def experiment_from_mapping(data: Any, base: Path, file: str = "") -> Experiment:
    """Resolve references inside an experiment mapping and validate it."""
    try:
        data = dict(_mapping(data, Path(file)))
        if "cluster" in data:
            c, cbase = _ref(data["cluster"], base, "cluster", lambda n: _no_catalog("cluster", n))
            if isinstance(c, dict):
                try:
                    c = _cluster_dict(c, cbase if cbase.is_dir() else cbase.parent)
                except InputError as e:
                    raise e.within(prefix="cluster") from None
            data["cluster"] = c
        for key in ("actor", "genrm"):
            if data.get(key) is not None:
                data[key] = _model_dict(data[key], base, key)
        if "workload" in data:
            data["workload"], _ = _ref(data["workload"], base, "workload",
                                       lambda n: _no_catalog("workload", n))
        return from_dict(Experiment, data)
    except InputError as e:
        raise e.within(file=file) from None


def _no_catalog(kind: str, name: str) -> Any:
    raise InputError(f"got {show(name)}; allowed: a path to a {kind} .yaml file or an inline mapping")


def load_experiment(path: str | Path) -> Experiment:
    path = Path(path)
    data = read_yaml(path)
    return experiment_from_mapping(data, path.parent, file=str(path))


def load_plan(path: str | Path) -> Plan:
    path = Path(path)
    data = read_yaml(path)
    try:
        return from_dict(Plan, _mapping(data, path))
    except InputError as e:
        raise e.within(file=str(path)) from None


def is_plan_file(path: str | Path) -> bool:
    """A plan.yaml has top-level `mode` and `placements`; an experiment does not."""
    data = read_yaml(path)
    return isinstance(data, dict) and "placements" in data and "mode" in data


def dump_yaml(obj: Any, path: str | Path) -> None:
    """Write a spec (or plain data) as YAML atomically: temp file, then rename."""
    path = Path(path)
    data = to_dict(obj) if hasattr(obj, "__dataclass_fields__") else obj
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        yaml.safe_dump(data, f, sort_keys=False, default_flow_style=None, width=100)
    tmp.replace(path)
