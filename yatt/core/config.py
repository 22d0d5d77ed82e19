"""Load experiment configs and plans from YAML, strictly; write them back atomically.

Why: one place turns files into validated specs. An experiment file may name its parts
by catalog name (`actor: Qwen2.5-1.5B`), by a path relative to itself
(`cluster: cluster/a100-80g-6x8.yaml`), or inline. Every failure is an `InputError` that
names the file and the field path.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import yaml

from . import catalog
from .errors import InputError
from .hfspec import model_spec_from_hf
from .jobspec import ChatTemplate
from .plan import Experiment, Plan
from .schema import from_dict, show, to_dict
from .yamlio import parse_yaml

_YAML_SUFFIXES = (".yaml", ".yml")


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
    if isinstance(value, str) and not value.endswith(_YAML_SUFFIXES):
        d = Path(value) if os.path.isabs(value) else base / value
        if _is_file(d / "config.json"):      # a Hugging Face checkpoint directory
            try:
                return to_dict(model_spec_from_hf(d))
            except InputError as e:
                raise e.within(prefix=field) from None
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
        _job_paths(data, base)
        return from_dict(Experiment, data)
    except InputError as e:
        raise e.within(file=file) from None


def _abs(value: Any, base: Path) -> Any:
    """A path string made absolute against `base` (other values pass through: from_dict
    names their type error)."""
    if isinstance(value, str) and value and not os.path.isabs(value):
        return str((base / os.path.expanduser(value)).resolve())
    return value


def _job_paths(data: dict, base: Path) -> None:
    """Make the job's file references absolute (against the experiment file's folder) and
    inline `genrm_judge.template_file`, so the plan.yaml written from it stands alone."""
    sec = data.get("data")
    if isinstance(sec, dict):
        sec = dict(sec)
        for key in ("train", "eval"):
            if key in sec:
                sec[key] = _abs(sec[key], base)
        modes = {m.value for m in ChatTemplate}
        if isinstance(sec.get("chat_template"), str) and sec["chat_template"] not in modes:
            sec["chat_template"] = _abs(sec["chat_template"], base)
        data["data"] = sec
    rew = data.get("reward")
    if isinstance(rew, dict) and isinstance(rew.get("function"), str):
        mod, sep, fn = rew["function"].rpartition(":")
        if sep and mod.endswith(".py"):
            rew = {**rew, "function": f"{_abs(mod, base)}:{fn}"}
        data["reward"] = rew
    log = data.get("log")
    if isinstance(log, dict):
        data["log"] = {**log, **{k: _abs(log[k], base) for k in ("tensorboard", "mlflow")
                                 if k in log}}
    judge = data.get("genrm_judge")
    if isinstance(judge, dict) and "template_file" in judge:
        judge = dict(judge)
        ref = judge.pop("template_file")
        if "template" in judge:
            raise InputError("give either template or template_file, not both",
                             field="genrm_judge.template_file")
        if not isinstance(ref, str) or not ref:
            raise InputError(f"got {show(ref)}; allowed: a path to a text file",
                             field="genrm_judge.template_file")
        path = Path(_abs(ref, base))
        try:
            judge["template"] = path.read_bytes().decode("utf-8")
        except OSError as e:
            raise InputError(f"cannot read {path}: {e.strerror or e}",
                             field="genrm_judge.template_file") from None
        except UnicodeDecodeError as e:
            raise InputError(f"{path} is not UTF-8 text (byte {e.start})",
                             field="genrm_judge.template_file") from None
        data["genrm_judge"] = judge


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
