"""GPU and model catalogs shipped as YAML package data.

Why: every hardware and model coefficient lives in data with a `source:` note, never
inline in code. Loaded lazily and cached, so importing yatt does no I/O.
"""
from __future__ import annotations

import functools
from importlib import resources
from typing import Any

from .errors import InputError
from .schema import from_dict, show
from .specs import GpuSpec, ModelSpec
from .yamlio import parse_yaml


@functools.lru_cache(maxsize=None)
def _raw(name: str) -> dict[str, dict[str, Any]]:
    return parse_yaml(resources.files("yatt").joinpath("catalog", name).read_text())


def gpu_names() -> list[str]:
    return list(_raw("gpus.yaml"))


def model_names() -> list[str]:
    return list(_raw("models.yaml"))


def gpu(name: str) -> GpuSpec:
    raw = _raw("gpus.yaml")
    if name not in raw:
        raise InputError(f"unknown GPU {show(name)}; allowed: {'|'.join(raw)}")
    return from_dict(GpuSpec, {"name": name, **raw[name]})


def model(name: str) -> ModelSpec:
    raw = _raw("models.yaml")
    if name not in raw:
        raise InputError(f"unknown model {show(name)}; allowed: {'|'.join(raw)} "
                         "or a path to a model .yaml")
    return from_dict(ModelSpec, {"name": name, **raw[name]})
