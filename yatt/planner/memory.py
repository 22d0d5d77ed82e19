"""Memory model: bytes per device for each role under a placement, and a fits() verdict.

Why: the planner must prune placements that cannot run (a 72B GenRM at TP=1 on an 80 GB
GPU) before simulating them, and tell the user why in plain numbers.

Conventions (Megatron-Core mixed precision, vLLM):
- trainer weights in bf16 (2 B/param); main grads in fp32 (4 B/param, Megatron's
  `main_grad` buffers); Adam = fp32 master copy + m + v = 12 B/param, sharded over DP with
  the distributed optimizer (ZeRO-1 style);
- activations per layer per token: ~34*h bytes without recompute (Korthikanti et al. 2022,
  flash attention so no s^2 score term), ~2*h bytes with full recompute (layer inputs
  only) plus one layer's full activations; fp32 logits for the loss (4*vocab B/token);
- an inference engine takes `gpu_memory_utilization` of the device; after weights and a
  fixed runtime reserve, the rest is KV cache.
"""
from __future__ import annotations

from dataclasses import dataclass

from yatt.core.plan import Parallel
from yatt.core.roles import Role
from yatt.core.specs import AlgoSpec, EngineSpec, GpuSpec, ModelSpec

GB = 1e9
GRAD_BYTES = 4           # Megatron main_grad in fp32
ADAM_BYTES = 12          # fp32 master weights + exp_avg + exp_avg_sq
ACT_BYTES_PER_H = 34     # bytes per token per hidden unit per layer, no recompute
RECOMPUTE_BYTES_PER_H = 2
LOGIT_BYTES = 4          # fp32 logits for the log-prob / loss
RUNTIME_RESERVE_GB = 1.0  # CUDA context, allocator slack, NCCL buffers (per device)


@dataclass(frozen=True)
class MemoryBreakdown:
    role: Role
    weights: float
    grads: float
    optimizer: float
    activations: float
    kv_cache: float
    reserve: float
    capacity: float

    @property
    def total(self) -> float:
        return (self.weights + self.grads + self.optimizer + self.activations + self.kv_cache
                + self.reserve)

    @property
    def margin(self) -> float:
        """Free bytes left (negative = does not fit)."""
        return self.capacity - self.total

    def fits(self) -> bool:
        return self.margin >= 0


def kv_shard(model: ModelSpec, tp: int) -> int:
    """How many ways the KV heads are split under TP (replicated when tp > kv_heads)."""
    return min(tp, model.kv_heads)


def trainer_memory(model: ModelSpec, par: Parallel, algo: AlgoSpec, gpu: GpuSpec,
                   micro_batch_tokens: int | None = None) -> MemoryBreakdown:
    """Peak bytes per device for actor training."""
    shard = par.tp * par.pp
    params = model.params / shard
    opt_div = par.dp if algo.distributed_optimizer else 1
    t = micro_batch_tokens or algo.micro_batch_tokens
    layers = model.layers / par.pp
    if algo.recompute:
        act = layers * t * model.hidden * RECOMPUTE_BYTES_PER_H + t * model.hidden * ACT_BYTES_PER_H
    else:
        act = layers * t * model.hidden * ACT_BYTES_PER_H
    act = act / par.tp * min(par.pp, 2)  # sequence parallel; 1F1B keeps ~pp micro-batches in flight
    act += t * model.vocab * LOGIT_BYTES / par.tp
    return MemoryBreakdown(Role.TRAINER, weights=params * 2, grads=params * GRAD_BYTES,
                           optimizer=params * ADAM_BYTES / opt_div, activations=act, kv_cache=0.0,
                           reserve=RUNTIME_RESERVE_GB * GB, capacity=gpu.hbm_bytes)


def reference_memory(model: ModelSpec, par: Parallel, algo: AlgoSpec, gpu: GpuSpec) -> MemoryBreakdown:
    """Frozen reference policy: bf16 weights + a forward pass's logits."""
    shard = par.tp * par.pp
    act = algo.micro_batch_tokens * (model.hidden * 4 + model.vocab * LOGIT_BYTES) / par.tp
    return MemoryBreakdown(Role.REFERENCE, weights=model.params / shard * 2, grads=0.0,
                           optimizer=0.0, activations=act, kv_cache=0.0,
                           reserve=RUNTIME_RESERVE_GB * GB, capacity=gpu.hbm_bytes)


def engine_weight_bytes(model: ModelSpec, tp: int) -> float:
    return model.params * model.dtype_bytes / tp


def kv_bytes_per_token_per_device(model: ModelSpec, tp: int) -> float:
    return model.kv_bytes_per_token / kv_shard(model, tp)


def engine_kv_bytes(model: ModelSpec, tp: int, gpu: GpuSpec, mem_util: float) -> float:
    """KV-cache pool per device of an inference engine (0 if the weights don't fit)."""
    budget = gpu.hbm_bytes * mem_util - RUNTIME_RESERVE_GB * GB
    return max(0.0, budget - engine_weight_bytes(model, tp))


def engine_memory(model: ModelSpec, tp: int, role: Role, engine: EngineSpec, gpu: GpuSpec,
                  min_kv_tokens: int = 0) -> MemoryBreakdown:
    """An inference engine (rollout or GenRM). It fits if the weights plus room for
    `min_kv_tokens` of KV fit inside `gpu_memory_utilization` of the device."""
    need_kv = min_kv_tokens * kv_bytes_per_token_per_device(model, tp)
    cap = gpu.hbm_bytes * engine.gpu_memory_utilization
    # kv_cache is the minimum KV the engine needs; the margin is the extra KV pool it gets.
    return MemoryBreakdown(role, weights=engine_weight_bytes(model, tp), grads=0.0, optimizer=0.0,
                           activations=0.0, kv_cache=need_kv, reserve=RUNTIME_RESERVE_GB * GB,
                           capacity=cap)


def min_engine_tp(model: ModelSpec, gpu: GpuSpec, engine: EngineSpec, min_kv_tokens: int,
                  choices: tuple[int, ...] = (1, 2, 4, 8, 16)) -> int | None:
    """Smallest valid TP at which an engine fits with room for `min_kv_tokens`."""
    for tp in sorted(choices):
        if model.check_tp(tp) is None and engine_memory(
                model, tp, Role.ROLLOUT, engine, gpu, min_kv_tokens).fits():
            return tp
    return None
