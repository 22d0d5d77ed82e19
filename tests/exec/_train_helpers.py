"""Shared helpers for the trainer / conversion / shim tests (tiny specs, built models, ports)."""
from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from yatt.core.config import read_yaml  # noqa: E402
from yatt.core.schema import from_dict  # noqa: E402
from yatt.core.specs import ModelSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "_artifacts" / "exec_train"


def load_spec(name: str = "tiny-actor") -> ModelSpec:
    return from_dict(ModelSpec, read_yaml(ROOT / "configs" / "model" / f"{name}.yaml"))


def llama_spec() -> ModelSpec:
    """Untied, bias-free, GQA variant used to exercise the Llama path."""
    return dataclasses.replace(load_spec(), name="tiny-llama", qkv_bias=False,
                               tied_embeddings=False)


def built_model(spec: ModelSpec, arch: str = "qwen2", seed: int = 0) -> Path:
    """Build (once, cached under tests/_artifacts) an HF checkpoint for spec."""
    from yatt.exec.hf_model import build_hf_model
    return build_hf_model(spec, ARTIFACTS / f"{spec.name}-{arch}-s{seed}", seed=seed, arch=arch)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
