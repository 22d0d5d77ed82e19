"""Tiny HF model + tokenizer builder: shapes from the spec, seeded, idempotent, offline."""
from __future__ import annotations

import json

import pytest
import torch

from tests.exec._train_helpers import llama_spec, load_spec
from yatt.core.errors import InputError
from yatt.exec.hf_model import VOCAB, Arch, build_hf_model, build_tokenizer

TEXT = "Q: 12+3=?\nSa b. xyz*-"


def test_tokenizer_roundtrip(tmp_path):
    tok = build_tokenizer(tmp_path)
    ids = tok(TEXT)["input_ids"]
    assert len(ids) == len(TEXT) and tok.decode(ids) == TEXT
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert len(tok) == len(VOCAB) <= 64


@pytest.mark.parametrize("arch", list(Arch))
def test_build_model_matches_spec_and_autoloads(tmp_path, arch):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    spec = load_spec() if arch is Arch.QWEN2 else llama_spec()
    out = build_hf_model(spec, tmp_path / "m", seed=3, arch=arch)
    model = AutoModelForCausalLM.from_pretrained(out)
    qk_norms = 2 * spec.dim_head * spec.layers if arch is Arch.QWEN3 else 0   # not in ModelSpec
    assert sum(p.numel() for p in model.parameters()) == spec.params + qk_norms
    assert model.config.head_dim == spec.dim_head >= 32
    assert model.config.tie_word_embeddings == spec.tied_embeddings
    tok = AutoTokenizer.from_pretrained(out)  # qwen2 forces Qwen2Tokenizer: ids must agree
    ids = tok(TEXT)["input_ids"]
    assert tok.decode(ids) == TEXT and len(ids) == len(TEXT)
    mtime = (out / "model.safetensors").stat().st_mtime_ns
    build_hf_model(spec, out, seed=3, arch=arch)            # same stamp: no rebuild
    assert (out / "model.safetensors").stat().st_mtime_ns == mtime
    assert json.loads((out / "yatt_build.json").read_text())["seed"] == 3


def test_seeded_and_rebuilt_on_change(tmp_path):
    from safetensors.torch import load_file
    spec = load_spec()
    a = load_file(build_hf_model(spec, tmp_path / "a", seed=1) / "model.safetensors")
    b = load_file(build_hf_model(spec, tmp_path / "b", seed=1) / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)   # exact: same seed, same code, same order
    c = load_file(build_hf_model(spec, tmp_path / "a", seed=2) / "model.safetensors")
    assert not torch.equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"])


def test_bias_arch_mismatch_rejected(tmp_path):
    with pytest.raises(InputError):
        build_hf_model(load_spec(), tmp_path, seed=0, arch="llama")
