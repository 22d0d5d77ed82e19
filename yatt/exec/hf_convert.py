"""HF (Qwen2/Llama/Qwen3 safetensors) <-> Megatron-Core GPTModel weight conversion, with TP sharding.

Why: the trainer starts from an HF checkpoint and must hand HF-named weights back to vLLM
after every step. Conversion is split in two layers so each is simple and testable:
  * names + fused layouts:  `hf_to_megatron` / `megatron_to_hf` work on *full* (TP=1)
    megatron-named tensors. QKV is fused per GQA group as megatron lays it out:
    for each KV group g, [q heads of g; k_g; v_g] along dim 0. `linear_fc1` is [gate; up].
  * TP sharding: `shard` / `unshard` split/concatenate the full tensors for a TP rank:
    column-parallel (qkv, fc1, embedding, output) along dim 0 -- fc1 splits gate and up
    separately; row-parallel (linear_proj, fc2) along dim 1; norms replicated (Qwen3's
    q/k norms act on one head's width, so every rank holds them whole). Because
    QKV groups are contiguous, a plain dim-0 split gives each rank kv_heads/tp groups.
  * PP stages: a `StageSlice` names the part of the model one pipeline stage holds (a
    contiguous range of layers, plus the embedding on the first stage and the final norm
    and output layer on the last). Megatron numbers a stage's layers from 0, so the
    conversion maps HF layer `i` to the stage's local layer `i - layers.start`. With tied
    embeddings and PP > 1 the last stage holds its own copy of the embedding as
    `output_layer.weight` (megatron keeps the two in step by summing their gradients); it
    is loaded from the HF embedding and never exported (HF has no `lm_head` when tied).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from yatt.core.specs import ModelSpec

from .hf_model import Arch

_L = "decoder.layers.{i}."
_COLUMN = ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias",
           "embedding.word_embeddings.weight", "output_layer.weight")
_ROW = ("self_attention.linear_proj.weight", "mlp.linear_fc2.weight")
_FC1 = "mlp.linear_fc1.weight"


@dataclass(frozen=True)
class StageSlice:
    """The part of the model one pipeline stage holds (global HF layer indices)."""

    layers: range
    first: bool          # holds the embedding
    last: bool           # holds the final norm and the output layer

    @classmethod
    def whole(cls, num_layers: int) -> "StageSlice":
        return cls(range(num_layers), True, True)

    @classmethod
    def of(cls, num_layers: int, pp: int, stage: int) -> "StageSlice":
        """Stage `stage` of `pp` equal, contiguous stages (megatron's default split)."""
        if num_layers % pp:
            raise ValueError(f"PP={pp} does not divide {num_layers} layers")
        n = num_layers // pp
        return cls(range(stage * n, (stage + 1) * n), stage == 0, stage == pp - 1)


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


# One-to-one renames (HF name -> megatron name); the fused QKV and gate/up are handled apart.
_TOP = (("model.embed_tokens.weight", "embedding.word_embeddings.weight"),
        ("model.norm.weight", "decoder.final_layernorm.weight"))
_LAYER = (("self_attn.o_proj.weight", "self_attention.linear_proj.weight"),
          ("input_layernorm.weight", "input_layernorm.weight"),
          ("post_attention_layernorm.weight", "pre_mlp_layernorm.weight"),
          ("mlp.down_proj.weight", "mlp.linear_fc2.weight"))
_QKV = ("q_proj", "k_proj", "v_proj")
_QK_NORM = (("self_attn.q_norm.weight", "self_attention.q_layernorm.weight"),
            ("self_attn.k_norm.weight", "self_attention.k_layernorm.weight"))


def _renames(spec: ModelSpec, arch: Arch, stage: StageSlice) -> list[tuple[str, str]]:
    """(HF name, megatron name) pairs of the stage's one-to-one tensors."""
    pairs = []
    if stage.first:
        pairs.append(_TOP[0])
    if stage.last:
        pairs.append(_TOP[1])
        if not spec.tied_embeddings:
            pairs.append(("lm_head.weight", "output_layer.weight"))
    layer = _LAYER + (_QK_NORM if arch is Arch.QWEN3 else ())
    for i in stage.layers:
        h, m = f"model.layers.{i}.", _L.format(i=i - stage.layers.start)
        pairs += [(h + a, m + b) for a, b in layer]
    return pairs


def _qkv_kinds(arch: Arch) -> tuple[str, ...]:
    return ("weight", "bias") if arch is Arch.QWEN2 else ("weight",)


def hf_to_megatron(hf: dict[str, torch.Tensor], spec: ModelSpec, arch: Arch,
                   stage: StageSlice | None = None) -> dict[str, torch.Tensor]:
    """HF-named tensors -> full (TP-unsharded) megatron-named tensors of `stage` (default:
    the whole model)."""
    arch = Arch(arch)
    stage = stage or StageSlice.whole(spec.layers)
    out = {mg: hf[name] for name, mg in _renames(spec, arch, stage)}
    if stage.last and spec.tied_embeddings and not stage.first:
        out["output_layer.weight"] = hf["model.embed_tokens.weight"]
    for i in stage.layers:
        h, m = f"model.layers.{i}.", _L.format(i=i - stage.layers.start)
        for kind in _qkv_kinds(arch):
            out[m + f"self_attention.linear_qkv.{kind}"] = _fuse_qkv(
                *(hf[h + f"self_attn.{p}.{kind}"] for p in _QKV), spec)
        out[m + _FC1] = torch.cat([hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"]])
    return {k: v.contiguous() for k, v in out.items()}


def megatron_to_hf(mg: dict[str, torch.Tensor], spec: ModelSpec, arch: Arch,
                   stage: StageSlice | None = None) -> dict[str, torch.Tensor]:
    """Full megatron-named tensors of `stage` (default: the whole model) -> HF-named
    tensors (lm_head omitted when tied)."""
    arch = Arch(arch)
    stage = stage or StageSlice.whole(spec.layers)
    out = {name: mg[m] for name, m in _renames(spec, arch, stage)}
    for i in stage.layers:
        h, m = f"model.layers.{i}.", _L.format(i=i - stage.layers.start)
        for kind in _qkv_kinds(arch):
            parts = _split_qkv(mg[m + f"self_attention.linear_qkv.{kind}"], spec)
            out.update({h + f"self_attn.{p}.{kind}": t for p, t in zip(_QKV, parts)})
        gate, up = torch.chunk(mg[m + _FC1], 2, dim=0)
        out[h + "mlp.gate_proj.weight"] = gate
        out[h + "mlp.up_proj.weight"] = up
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


def load_into_megatron(model, hf_path: str | Path, spec: ModelSpec, arch: Arch, tp: int, rank: int,
                       stage: StageSlice | None = None) -> None:
    """Copy an HF checkpoint's weights into this TP rank's GPTModel of `stage` (in place)."""
    own = shard(hf_to_megatron(load_hf_state_dict(hf_path), spec, arch, stage), tp, rank)
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


def gather_hf_weights(model, spec: ModelSpec, arch: Arch, stage: StageSlice, tp: int,
                      pp: int) -> dict[str, torch.Tensor]:
    """Full HF-named CPU copies of a Megatron replica's weights: this rank's parameters
    all-gathered over its TP group and unsharded, converted for its PP stage, then the
    stages' parts all-gathered. Collective over the replica; every rank returns them all."""
    from megatron.core import parallel_state as ps

    local = {n: p.detach() for n, p in model.named_parameters()}
    if tp > 1:
        group = ps.get_tensor_model_parallel_group()
        parts: list[dict[str, torch.Tensor]] = [{} for _ in range(tp)]
        for n, t in local.items():
            bufs = [torch.empty_like(t) for _ in range(tp)]
            torch.distributed.all_gather(bufs, t.contiguous(), group=group)
            for r in range(tp):
                parts[r][n] = bufs[r]
        full = unshard(parts)
    else:
        full = local
    mine = {k: v.cpu().clone() for k, v in megatron_to_hf(full, spec, arch, stage).items()}
    if pp == 1:
        return mine
    stages: list[Any] = [None] * pp
    torch.distributed.all_gather_object(stages, mine, group=ps.get_pipeline_model_parallel_group())
    return {k: v for part in stages for k, v in part.items()}
