"""HF <-> Megatron conversion: exact round trips (incl. TP shards) and logits equal to transformers."""
from __future__ import annotations

import pytest
import torch

from tests.exec._tolerance import logit_tol
from tests.exec._train_helpers import (built_model, llama_spec, load_spec, logit_cases, logit_ids,
                                       qwen3_spec, run_logits, spawn)
from yatt.exec.hf_convert import (StageSlice, hf_to_megatron, load_hf_state_dict, megatron_to_hf,
                                  shard, unshard)
from yatt.exec.hf_model import Arch

CASES = [(Arch.QWEN2, load_spec), (Arch.LLAMA, llama_spec), (Arch.QWEN3, qwen3_spec)]


@pytest.mark.parametrize("arch,spec_fn", CASES)
@pytest.mark.parametrize("tp", [1, 2])
def test_roundtrip_hf_megatron_hf_is_exact(arch, spec_fn, tp):
    spec = spec_fn()
    hf = load_hf_state_dict(built_model(spec, arch.value))
    full = hf_to_megatron(hf, spec, arch)
    parts = [shard(full, tp, r) for r in range(tp)]
    qkv = "decoder.layers.0.self_attention.linear_qkv.weight"
    d = spec.dim_head
    assert parts[0][qkv].shape[0] == (spec.heads + 2 * spec.kv_heads) * d // tp
    back = megatron_to_hf(unshard(parts), spec, arch)
    assert set(back) == set(hf)
    for k in hf:
        assert torch.equal(hf[k], back[k]), k   # exact: conversion and sharding move bytes only


@pytest.mark.parametrize("arch,spec_fn", CASES)
def test_pipeline_stages_split_and_reassemble_exactly(arch, spec_fn):
    """Each PP=2 stage converts its own layers (numbered from 0 in megatron), the first
    stage the embedding, the last the final norm and output layer (with tied embeddings a
    copy of the embedding, never exported); the stages' HF tensors reassemble the model."""
    spec = spec_fn()
    hf = load_hf_state_dict(built_model(spec, arch.value))
    stages = [StageSlice.of(spec.layers, 2, s) for s in range(2)]
    assert [list(s.layers) for s in stages] == [[0], [1]]
    parts = [hf_to_megatron(hf, spec, arch, s) for s in stages]
    assert "embedding.word_embeddings.weight" in parts[0]
    assert "embedding.word_embeddings.weight" not in parts[1]
    assert "decoder.final_layernorm.weight" in parts[1] and "output_layer.weight" in parts[1]
    assert not any(k.startswith("decoder.layers.1.") for p in parts for k in p)
    if spec.tied_embeddings:
        assert torch.equal(parts[1]["output_layer.weight"], hf["model.embed_tokens.weight"])
    back: dict = {}
    for p, s in zip(parts, stages):
        mine = megatron_to_hf(p, spec, arch, s)
        assert not set(mine) & set(back)
        back.update(mine)
    assert set(back) == set(hf)
    for k in hf:
        assert torch.equal(hf[k], back[k]), k


def test_qkv_layout_is_grouped_per_kv_head():
    """Megatron fuses [q heads of group g; k_g; v_g] per KV group (checked on labelled rows)."""
    spec = load_spec()  # 4 heads, 2 kv heads, head_dim 32
    d, h = spec.dim_head, spec.hidden
    q = torch.arange(spec.heads).repeat_interleave(d).float()[:, None].expand(-1, h)
    k = 100 + torch.arange(spec.kv_heads).repeat_interleave(d).float()[:, None].expand(-1, h)
    v = 200 + torch.arange(spec.kv_heads).repeat_interleave(d).float()[:, None].expand(-1, h)
    hf = load_hf_state_dict(built_model(spec))
    hf["model.layers.0.self_attn.q_proj.weight"] = q
    hf["model.layers.0.self_attn.k_proj.weight"] = k
    hf["model.layers.0.self_attn.v_proj.weight"] = v
    qkv = hf_to_megatron(hf, spec, Arch.QWEN2)["decoder.layers.0.self_attention.linear_qkv.weight"]
    rows = qkv[::d, 0].tolist()
    assert rows == [0, 1, 100, 200, 2, 3, 101, 201]


def _check_logits(tmp_path, tp):
    from transformers import AutoModelForCausalLM
    spawn(run_logits, tp, {}, tmp_path)
    got = torch.load(tmp_path / "logits.pt")
    diffs = {}
    for label, arch, spec, rope in logit_cases():
        hf = AutoModelForCausalLM.from_pretrained(built_model(spec, arch, rope_scaling=rope)).eval()
        with torch.no_grad():
            ref = hf(logit_ids()).logits
        diffs[label] = (got[label] - ref).abs().max().item()
        # the same logits by other kernels (and TP shards): within the forward's rounding
        tol = logit_tol(spec, logit_ids().shape[1], ref.abs().max().item())
        assert diffs[label] <= tol, (label, diffs[label], tol)
    assert set(diffs) == {"qwen2", "llama", "llama3.1", "qwen3"}
    return diffs


def test_megatron_logits_equal_transformers_tp1(tmp_path):
    _check_logits(tmp_path, 1)


@pytest.mark.slow
def test_megatron_logits_equal_transformers_tp2(tmp_path):
    _check_logits(tmp_path, 2)
