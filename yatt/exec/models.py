"""Where model checkpoints come from: a spec's `hf_path`, or built on the fly and cached.

Why: the CPU demo's models have no checkpoint (`hf_path: ""`); they are built from the
ModelSpec with a seeded random init (`hf_model.build_hf_model`) into a cache directory
(`$YATT_CACHE`, else `~/.cache/yatt/models`) so later runs and tests reuse them.
The learning demo's models (`demo-actor`, `demo-genrm`) are ordinary HF directories that
ship with yatt (`hf_path` in their model YAML), made by `yatt demo prepare`.
"""
from __future__ import annotations

import os
from pathlib import Path

from yatt.core.errors import InputError
from yatt.core.specs import ModelSpec


def cache_dir() -> Path:
    root = os.environ.get("YATT_CACHE")
    return Path(root) / "models" if root else Path.home() / ".cache" / "yatt" / "models"


def resolve_model(spec: ModelSpec, seed: int = 0) -> Path:
    """Local checkpoint directory for `spec` (built if it has no hf_path)."""
    if spec.hf_path:
        p = Path(spec.hf_path).expanduser()
        if not (p / "config.json").is_file():
            raise InputError(f"no HF checkpoint (config.json) at {p}", field="hf_path")
        return p
    from .hf_model import build_hf_model

    return build_hf_model(spec, cache_dir() / f"{spec.name}-s{seed}", seed)
