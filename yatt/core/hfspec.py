"""ModelSpec from a local Hugging Face checkpoint's config.json.

Why: users bring HF checkpoints (Qwen2/Llama families); the planner needs their shape and
the executor their path. Reading config.json needs only the standard library, so it
lives in core and works on the light install.
"""
from __future__ import annotations

import json
from pathlib import Path

from .errors import InputError
from .safeio import read_text_at_most
from .schema import from_dict

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}   # HF dtype name -> bytes per element
_FIELDS = {  # ModelSpec field: config.json key
    "layers": "num_hidden_layers", "hidden": "hidden_size", "intermediate": "intermediate_size",
    "heads": "num_attention_heads", "vocab": "vocab_size",
}


def model_spec_from_hf(path: str | Path, name: str = ""):
    """Read `path/config.json` into a ModelSpec with `hf_path` set to `path`."""
    from .specs import ModelSpec

    path = Path(path)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise InputError("not a Hugging Face checkpoint directory (no config.json)", file=str(path))
    try:
        cfg = json.loads(read_text_at_most(cfg_file))   # bounded: YATT_CONFIG_MAX_BYTES
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON ({e.msg})", file=str(cfg_file)) from None
    except RecursionError:
        raise InputError("invalid JSON (nested too deeply)", file=str(cfg_file)) from None
    if not isinstance(cfg, dict):
        raise InputError(f"got a JSON {type(cfg).__name__}; allowed: an object", file=str(cfg_file))
    mt = cfg.get("model_type", "")
    missing = [k for k in _FIELDS.values() if k not in cfg]
    if missing:
        raise InputError(f"missing {', '.join(missing)} (model_type {mt or 'unknown'!r}: not a "
                         "Qwen2/Llama-style decoder config)", file=str(cfg_file))
    data = {f: cfg[k] for f, k in _FIELDS.items()}
    data.update(
        name=name or path.name,
        kv_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        head_dim=int(cfg.get("head_dim") or 0),
        qkv_bias=bool(cfg.get("attention_bias", mt == "qwen2")),
        dtype_bytes=DTYPE_BYTES.get(str(cfg.get("torch_dtype", cfg.get("dtype", "bfloat16"))), 2),
        hf_path=str(path.resolve()),
        source=f"{cfg_file} ({mt or 'unknown type'})",
    )
    try:
        return from_dict(ModelSpec, data)
    except InputError as e:
        raise e.within(file=str(cfg_file)) from None
