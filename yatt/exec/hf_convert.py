"""HF (Qwen2/Llama safetensors) <-> Megatron-Core GPTModel weight conversion, with TP sharding.

Why: the trainer starts from an HF checkpoint and must hand HF-named weights back to vLLM
after every step. Conversion is split in two layers so each is simple and testable:
  * names + fused layouts:  `hf_to_megatron` / `megatron_to_hf` work on *full* (TP=1)
    megatron-named tensors. QKV is fused per GQA group as megatron lays it out:
    for each KV group g, [q heads of g; k_g; v_g] along dim 0. `linear_fc1` is [gate; up].
  * TP sharding: `shard` / `unshard` split/concatenate the full tensors for a TP rank:
    column-parallel (qkv, fc1, embedding, output) along dim 0 -- fc1 splits gate and up
    separately; row-parallel (linear_proj, fc2) along dim 1; norms replicated. Because
    QKV groups are contiguous, a plain dim-0 split gives each rank kv_heads/tp groups.
"""
from __future__ import annotations

from pathlib import Path

import torch

from yatt.core.specs import ModelSpec

from .hf_model import Arch

_L = "decoder.layers.{i}."
_COLUMN = ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias",
           "embedding.word_embeddings.weight", "output_layer.weight")
_ROW = ("self_attention.linear_proj.weight", "mlp.linear_fc2.weight")
_FC1 = "mlp.linear_fc1.weight"


def load_hf_state_dict(hf_path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of an HF safetensors checkpoint (single or sharded files)."""
    from safetensors.torch import load_file
    out: dict[str, torch.Tensor] = {}
    for f in sorted(Path(hf_path).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def _fuse_qkv(q, k, v, spec: ModelSpec):
    g, d = spec.kv_heads, spec.dim_head
    qpg = spec.heads // g
    rest = q.shape[1:]
    q = q.reshape(g, qpg * d, *rest)
    k = k.reshape(g, d, *rest)
    v = v.reshape(g, d, *rest)
    return torch.cat([q, k, v], dim=1).reshape(g * (qpg + 2) * d, *rest)


def _split_qkv(qkv, spec: ModelSpec):
    g, d = spec.kv_heads, spec.dim_head
    qpg = spec.heads // g
    rest = qkv.shape[1:]
    x = qkv.reshape(g, (qpg + 2) * d, *rest)
    q, k, v = torch.split(x, [qpg * d, d, d], dim=1)
    return (q.reshape(spec.heads * d, *rest), k.reshape(g * d, *rest), v.reshape(g * d, *rest))


def hf_to_megatron(hf: dict[str, torch.Tensor], spec: ModelSpec, arch: Arch) -> dict[str, torch.Tensor]:
    """HF-named tensors -> full (unsharded) megatron-named tensors."""
    arch = Arch(arch)
    out = {"embedding.word_embeddings.weight": hf["model.embed_tokens.weight"],
           "decoder.final_layernorm.weight": hf["model.norm.weight"]}
    if not spec.tied_embeddings:
        out["output_layer.weight"] = hf["lm_head.weight"]
    for i in range(spec.layers):
        h, m = f"model.layers.{i}.", _L.format(i=i)
        a = h + "self_attn."
        out[m + "self_attention.linear_qkv.weight"] = _fuse_qkv(
            hf[a + "q_proj.weight"], hf[a + "k_proj.weight"], hf[a + "v_proj.weight"], spec)
        if arch is Arch.QWEN2:
            out[m + "self_attention.linear_qkv.bias"] = _fuse_qkv(
                hf[a + "q_proj.bias"], hf[a + "k_proj.bias"], hf[a + "v_proj.bias"], spec)
        out[m + "self_attention.linear_proj.weight"] = hf[a + "o_proj.weight"]
        out[m + "input_layernorm.weight"] = hf[h + "input_layernorm.weight"]
        out[m + "pre_mlp_layernorm.weight"] = hf[h + "post_attention_layernorm.weight"]
        out[m + _FC1] = torch.cat([hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"]])
        out[m + "mlp.linear_fc2.weight"] = hf[h + "mlp.down_proj.weight"]
    return {k: v.contiguous() for k, v in out.items()}


def megatron_to_hf(mg: dict[str, torch.Tensor], spec: ModelSpec, arch: Arch) -> dict[str, torch.Tensor]:
    """Full megatron-named tensors -> HF-named tensors (lm_head omitted when tied)."""
    arch = Arch(arch)
    out = {"model.embed_tokens.weight": mg["embedding.word_embeddings.weight"],
           "model.norm.weight": mg["decoder.final_layernorm.weight"]}
    if not spec.tied_embeddings:
        out["lm_head.weight"] = mg["output_layer.weight"]
    for i in range(spec.layers):
        h, m = f"model.layers.{i}.", _L.format(i=i)
        a = h + "self_attn."
        q, k, v = _split_qkv(mg[m + "self_attention.linear_qkv.weight"], spec)
        out.update({a + "q_proj.weight": q, a + "k_proj.weight": k, a + "v_proj.weight": v})
        if arch is Arch.QWEN2:
            q, k, v = _split_qkv(mg[m + "self_attention.linear_qkv.bias"], spec)
            out.update({a + "q_proj.bias": q, a + "k_proj.bias": k, a + "v_proj.bias": v})
        out[a + "o_proj.weight"] = mg[m + "self_attention.linear_proj.weight"]
        out[h + "input_layernorm.weight"] = mg[m + "input_layernorm.weight"]
        out[h + "post_attention_layernorm.weight"] = mg[m + "pre_mlp_layernorm.weight"]
        gate, up = torch.chunk(mg[m + _FC1], 2, dim=0)
        out[h + "mlp.gate_proj.weight"] = gate
        out[h + "mlp.up_proj.weight"] = up
        out[h + "mlp.down_proj.weight"] = mg[m + "mlp.linear_fc2.weight"]
    return {k: v.contiguous() for k, v in out.items()}


def _kind(name: str) -> str:
    if name.endswith(_FC1):
        return "fc1"
    if name.endswith(_COLUMN):
        return "col"
    if name.endswith(_ROW):
        return "row"
    if name.endswith("layernorm.weight"):
        return "rep"
    raise KeyError(f"no TP rule for megatron parameter {name!r}")


def shard(full: dict[str, torch.Tensor], tp: int, rank: int) -> dict[str, torch.Tensor]:
    """The TP-rank-`rank` slice of full megatron-named tensors."""
    out = {}
    for name, t in full.items():
        kind = _kind(name)
        if kind == "rep" or tp == 1:
            out[name] = t
        elif kind == "col":
            out[name] = torch.chunk(t, tp, dim=0)[rank]
        elif kind == "row":
            out[name] = torch.chunk(t, tp, dim=1)[rank]
        else:  # fc1: [gate; up] -> [gate_r; up_r]
            gate, up = torch.chunk(t, 2, dim=0)
            out[name] = torch.cat([torch.chunk(gate, tp)[rank], torch.chunk(up, tp)[rank]])
        out[name] = out[name].contiguous()
    return out


def unshard(parts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Inverse of `shard`: TP ranks' tensors (in rank order) -> full tensors."""
    out = {}
    for name in parts[0]:
        ts = [p[name] for p in parts]
        kind = _kind(name)
        if kind == "rep" or len(ts) == 1:
            out[name] = ts[0]
        elif kind == "col":
            out[name] = torch.cat(ts, dim=0)
        elif kind == "row":
            out[name] = torch.cat(ts, dim=1)
        else:
            halves = [torch.chunk(t, 2, dim=0) for t in ts]
            out[name] = torch.cat([h[0] for h in halves] + [h[1] for h in halves])
    return out


def load_into_megatron(model, hf_path: str | Path, spec: ModelSpec, arch: Arch, tp: int, rank: int) -> None:
    """Copy an HF checkpoint's weights into this TP rank's GPTModel (in place)."""
    own = shard(hf_to_megatron(load_hf_state_dict(hf_path), spec, arch), tp, rank)
    params = dict(model.named_parameters())
    missing = set(params) - set(own)
    extra = set(own) - set(params)
    if missing or extra:
        raise KeyError(f"conversion mismatch: missing {sorted(missing)}, unexpected {sorted(extra)}")
    with torch.no_grad():
        for name, p in params.items():
            if p.shape != own[name].shape:
                raise ValueError(f"{name}: model {tuple(p.shape)} vs converted {tuple(own[name].shape)}")
            p.copy_(own[name])
