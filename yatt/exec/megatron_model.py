"""Build a Megatron-Core GPTModel that mirrors an HF Qwen2/Llama/Qwen3 checkpoint.

Why: the trainer and the conversion tests need the same model construction (local layer
spec, RMSNorm, SwiGLU, GQA, rotary with the checkpoint's rope theta (and Llama 3.1's
scaling), qkv bias, Qwen3's QK-norm, tied
embeddings, fp32, no dropout). `HfMeta` carries the few architecture facts that live in
the checkpoint's config.json rather than in our `ModelSpec`. At PP > 1 each stage builds
only its `StageSlice` (hf_convert.py) of the model; the config then also says what
megatron's pipeline schedule needs (stage-to-stage dtype, per-micro-batch shapes).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from yatt.core.errors import InputError
from yatt.core.specs import ModelSpec

from .hf_convert import StageSlice
from .hf_model import Arch


@dataclass(frozen=True)
class HfMeta:
    """Architecture facts read from an HF config.json."""

    arch: Arch
    rope_theta: float
    rms_eps: float
    rope_factor: float = 0.0     # Llama 3.1+ "llama3" rope scaling factor (0: none)

    @property
    def qk_norm(self) -> bool:
        return self.arch is Arch.QWEN3

    @classmethod
    def read(cls, hf_path: str | Path) -> "HfMeta":
        cfg = json.loads((Path(hf_path) / "config.json").read_text())
        mt = cfg.get("model_type")
        if mt not in (a.value for a in Arch):
            raise InputError(f"unsupported HF model_type {mt!r}", field="hf_path")
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in ("default", "llama3"):
            raise InputError(f"rope scaling {kind!r} not supported", field="hf_path")
        theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
        factor = float(rope.get("factor", 8.0)) if kind == "llama3" else 0.0
        return cls(Arch(mt), float(theta), float(cfg.get("rms_norm_eps", 1e-6)), factor)


def check_spec_matches(spec: ModelSpec, hf_path: str | Path) -> None:
    """Raise InputError if the checkpoint's shape disagrees with spec."""
    cfg = json.loads((Path(hf_path) / "config.json").read_text())
    pairs = {"layers": "num_hidden_layers", "hidden": "hidden_size",
             "intermediate": "intermediate_size", "heads": "num_attention_heads",
             "kv_heads": "num_key_value_heads", "vocab": "vocab_size",
             "tied_embeddings": "tie_word_embeddings"}
    for ours, theirs in pairs.items():
        if cfg.get(theirs) != getattr(spec, ours):
            raise InputError(f"{hf_path}: {theirs}={cfg.get(theirs)} but spec {ours}="
                             f"{getattr(spec, ours)}", field=ours)


def transformer_config(spec: ModelSpec, meta: HfMeta, tp: int, pp: int = 1, bf16: bool = False):
    from megatron.core.transformer.transformer_config import TransformerConfig
    if spec.kv_heads % tp or spec.heads % tp:
        raise InputError(f"TP={tp} must divide heads ({spec.heads}) and kv_heads "
                         f"({spec.kv_heads}) for Megatron", field="tp")
    if spec.vocab % tp:
        raise InputError(f"TP={tp} must divide vocab ({spec.vocab})", field="tp")
    return TransformerConfig(
        num_layers=spec.layers, hidden_size=spec.hidden, ffn_hidden_size=spec.intermediate,
        num_attention_heads=spec.heads, num_query_groups=spec.kv_heads, kv_channels=spec.dim_head,
        normalization="RMSNorm", layernorm_epsilon=meta.rms_eps, gated_linear_unit=True,
        activation_func=torch.nn.functional.silu, add_bias_linear=False,
        add_qkv_bias=meta.arch is Arch.QWEN2, hidden_dropout=0.0, attention_dropout=0.0,
        tensor_model_parallel_size=tp, use_cpu_initialization=True,
        params_dtype=torch.bfloat16 if bf16 else torch.float32, bf16=bf16,
        bias_activation_fusion=False, bias_dropout_fusion=False, masked_softmax_fusion=False,
        apply_rope_fusion=False, gradient_accumulation_fusion=False,
        cross_entropy_loss_fusion=False, persist_layer_norm=False,
        pipeline_model_parallel_size=pp,
        # what stages send each other: the activations' dtype (Float16Module casts at bf16)
        pipeline_dtype=torch.bfloat16 if bf16 else torch.float32,
        # micro-batches are packed by length: shapes differ, so stages exchange them first
        variable_seq_lengths=True,
        # no MoE layers here; the default (allgather) dispatcher refuses variable lengths
        moe_token_dispatcher_type="alltoall",
        # the trainer's loss is already a token mean over the whole (all-DP) batch: no
        # division by the micro-batch count in the schedule, and DDP sums gradients over
        # DP instead of averaging them
        calculate_per_token_loss=True,
    )


def build_gpt_model(spec: ModelSpec, meta: HfMeta, tp: int, device: str = "cpu", pp: int = 1,
                    stage: Optional[StageSlice] = None, bf16: bool = False):
    """A GPTModel for spec, or for its pipeline `stage` at PP > 1 (model-parallel state must
    already be initialised)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    stage = stage or StageSlice.whole(spec.layers)
    cfg = transformer_config(spec, meta, tp, pp, bf16)
    theta = meta.rope_theta
    layers = get_gpt_layer_local_spec(normalization="RMSNorm", qk_layernorm=meta.qk_norm)
    model = GPTModel(
        config=cfg, transformer_layer_spec=layers,
        vocab_size=spec.vocab, max_sequence_length=4096, parallel_output=True,
        share_embeddings_and_output_weights=spec.tied_embeddings,
        position_embedding_type="rope", rotary_base=int(theta) if theta.is_integer() else theta,
        pre_process=stage.first, post_process=stage.last,
        rope_scaling=bool(meta.rope_factor), rope_scaling_factor=meta.rope_factor or 8.0,
    )
    return model.to(device)


def wrap_for_training(model, lr: float, distributed_optimizer: bool, clip_grad: float,
                      bf16: bool):
    """(Megatron DDP around `model`, its Adam optimizer): fp32 gradient reduction, no
    weight decay, the distributed optimizer when asked; with `bf16` the model runs under
    Float16Module with fp32 main parameters and optimizer state."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    ddp_cfg = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False,
        use_distributed_optimizer=distributed_optimizer)
    inner = model
    if bf16:
        from megatron.core.transformer.module import Float16Module
        inner = Float16Module(model.config, model)
    ddp = DistributedDataParallel(model.config, ddp_cfg, inner)
    opt_cfg = OptimizerConfig(optimizer="adam", lr=lr, weight_decay=0.0, clip_grad=clip_grad,
                              bf16=bf16, fp16=False,
                              params_dtype=torch.bfloat16 if bf16 else torch.float32,
                              use_distributed_optimizer=distributed_optimizer)
    return ddp, get_megatron_optimizer(opt_cfg, [ddp])
