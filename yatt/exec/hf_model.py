"""Tiny HF models and a character tokenizer, built locally (no hub access).

Why: the CPU demo and the executor tests need real `transformers`/vLLM-loadable
checkpoints whose shapes come from a `ModelSpec`, with deterministic (seeded) random
weights. Nothing can be downloaded, so the tokenizer is a fixed character vocabulary
and the weights are a seeded random init saved as safetensors.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from enum import Enum
from pathlib import Path

from yatt.core.errors import InputError
from yatt.core.specs import ModelSpec

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
_UPPER = "ABCDEFGHIQRSTY"  # a few capitals (S for "Solution", Q for "Question", ...)
_CHARS = ("0123456789" + "+-*=:?." + " \n" + "abcdefghijklmnopqrstuvwxyz" + _UPPER)
VOCAB: tuple[str, ...] = SPECIAL_TOKENS + tuple(_CHARS)
_STAMP = "yatt_build.json"


class Arch(str, Enum):
    """HF architectures we can build and convert (all GQA + SwiGLU + RMSNorm)."""

    QWEN2 = "qwen2"   # q/k/v bias always on
    LLAMA = "llama"   # no biases (Llama 3.x; 3.1+ with llama3 rope scaling)
    QWEN3 = "qwen3"   # no biases, per-head RMSNorm on q and k (QK-norm)


def build_tokenizer(out_dir: str | os.PathLike):
    """A character-level `PreTrainedTokenizerFast` (len(VOCAB) <= 64), saved to out_dir.

    It is a byte-level BPE with no merges whose vocabulary is our characters (space and
    newline appear as the byte-level symbols 'Ġ'/'Ċ'). Why not a plain WordLevel: for
    model_type qwen2, `AutoTokenizer` (transformers 5) forces `Qwen2Tokenizer`, which
    rebuilds a byte-level pre-tokenizer around the saved vocabulary; this layout gives the
    same ids under that class, under `TokenizersBackend`, and in vLLM.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    assert len(VOCAB) <= 64 and len(set(VOCAB)) == len(VOCAB)
    vocab = {_byte_level(t): i for i, t in enumerate(VOCAB)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>", unk_token="<unk>")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))
    return fast


def _byte_level(token: str) -> str:
    """GPT-2 byte-to-unicode form of a one-character token (specials unchanged)."""
    if token in SPECIAL_TOKENS:
        return token
    return {" ": "\u0120", "\n": "\u010a"}.get(token, token)


def hf_config(spec: ModelSpec, arch: Arch | str = Arch.QWEN2, rope_theta: float = 1e6,
              rope_scaling: dict | None = None):
    """The `transformers` config for `spec` (float32). `rope_scaling`: extra rope parameters
    (e.g. Llama 3.1's {"rope_type": "llama3", "factor": 8.0, ...})."""
    arch = Arch(arch)
    if arch is Arch.QWEN2 and not spec.qkv_bias:
        raise InputError("Qwen2 always has q/k/v biases; use arch=llama for qkv_bias=false",
                         field="qkv_bias")
    if arch in (Arch.LLAMA, Arch.QWEN3) and spec.qkv_bias:
        raise InputError(f"{arch.value} (attention_bias) would also bias o_proj; use "
                         "qkv_bias=false", field="qkv_bias")
    if spec.vocab < len(VOCAB):
        raise InputError(f"vocab {spec.vocab} < tokenizer size {len(VOCAB)}", field="vocab")
    common = dict(vocab_size=spec.vocab, hidden_size=spec.hidden,
                  intermediate_size=spec.intermediate, num_hidden_layers=spec.layers,
                  num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
                  hidden_act="silu", max_position_embeddings=4096, rms_norm_eps=1e-6,
                  tie_word_embeddings=spec.tied_embeddings,
                  rope_parameters={"rope_type": "default", "rope_theta": rope_theta,
                                   **(rope_scaling or {})},
                  pad_token_id=0, bos_token_id=1, eos_token_id=2, dtype="float32")
    if arch is Arch.QWEN2:
        from transformers import Qwen2Config
        cfg = Qwen2Config(**common, use_sliding_window=False)
    elif arch is Arch.QWEN3:
        from transformers import Qwen3Config
        cfg = Qwen3Config(**common, attention_bias=False, use_sliding_window=False,
                          head_dim=spec.dim_head)
    else:
        from transformers import LlamaConfig
        cfg = LlamaConfig(**common, attention_bias=False, mlp_bias=False)
    cfg.head_dim = spec.dim_head
    return cfg


def build_hf_model(spec: ModelSpec, out_dir: str | os.PathLike, seed: int,
                   arch: Arch | str = Arch.QWEN2, rope_theta: float = 1e6,
                   rope_scaling: dict | None = None) -> Path:
    """Build a seeded random HF causal LM for `spec` in out_dir; idempotent via a stamp file.

    Saves `model.safetensors`, `config.json`, the tokenizer and `yatt_build.json` (the
    stamp: spec + seed + arch). Returns out_dir. If the stamp matches, nothing is rebuilt.
    """
    import torch
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM

    arch = Arch(arch)
    out = Path(out_dir)
    stamp = {"spec": asdict(spec), "seed": seed, "arch": arch.value, "rope_theta": rope_theta,
             "vocab": list(VOCAB), **({"rope_scaling": rope_scaling} if rope_scaling else {})}
    digest = hashlib.sha256(json.dumps(stamp, sort_keys=True).encode()).hexdigest()
    stamp_path = out / _STAMP
    if stamp_path.exists() and (out / "model.safetensors").exists():
        try:
            if json.loads(stamp_path.read_text()).get("digest") == digest:
                return out
        except (ValueError, OSError):
            pass
    cfg = hf_config(spec, arch, rope_theta, rope_scaling)
    cls = {Arch.QWEN2: Qwen2ForCausalLM, Arch.LLAMA: LlamaForCausalLM,
           Arch.QWEN3: Qwen3ForCausalLM}[arch]
    devnull = torch.random.fork_rng(devices=[])
    with devnull:
        torch.manual_seed(seed)
        model = cls(cfg).to(torch.float32)
        # HF inits biases to zero; give them small random values so conversion tests
        # actually exercise the bias layout.
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("_proj.bias"):
                    p.normal_(0.0, 0.02)
                elif name.endswith(("q_norm.weight", "k_norm.weight")):
                    p.normal_(1.0, 0.1)      # not all ones: tests see the QK-norm layout
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    build_tokenizer(out)
    stamp_path.write_text(json.dumps({"digest": digest, **stamp}, indent=1))
    return out
