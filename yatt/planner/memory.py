"""Memory model: bytes per device for each role under a placement, and a fits() verdict.

Why: the planner must prune placements that cannot run (a 72B GenRM at TP=1 on an 80 GB
GPU) before simulating them, and tell the user why in plain numbers.

Conventions (Megatron-Core mixed precision, vLLM):
- trainer weights in bf16 (2 B/param); main grads in fp32 (4 B/param, Megatron's
  `main_grad` buffers); Adam = fp32 master copy + m + v = 12 B/param (8 with bf16
  moments, `AlgoSpec.adam_moments`), sharded over DP with the distributed optimizer
  (ZeRO-1 style);
- pipeline parallelism (PP) splits the layers evenly over `pp` stages; the first stage also
  holds the input embedding, the last the output head and final norm (with tied
  embeddings the last keeps its own copy of the embedding, as Megatron does). Under 1F1B,
  stage i holds the activations of up to pp - i micro-batches at once (the first stage
  the most); only the last stage computes logits. A trainer fits when its fullest stage does;
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
from yatt.core.specs import AdamMoments, AlgoSpec, EngineSpec, GpuSpec, ModelSpec

GB = 1e9
GRAD_BYTES = 4           # Megatron main_grad in fp32
ADAM_BYTES = 12          # fp32 master weights + exp_avg + exp_avg_sq
MASTER_BYTES = 4         # the fp32 master copy of a bf16 weight
MOMENT_BYTES = {AdamMoments.FP32: 4, AdamMoments.BF16: 2}  # per moment (exp_avg, exp_avg_sq)
# An Adam step reads and writes the fp32 master (8 B) and both moments (4 x moment bytes),
# reads the fp32 grad (4), writes the bf16 weight (2), zeroes the grad buffer (4) and reads
# the bf16 weight for the copy (2): 20 B/param plus 16 (fp32 moments) or 8 (bf16 moments).
ADAM_STEP_FIXED_BYTES = 20
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
    stage: int = 0    # the trainer's pipeline stage these bytes are of
    stages: int = 1   # the trainer's pipeline stages (PP)

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


def optimizer_bytes(moments: AdamMoments) -> int:
    """Adam state bytes per parameter: the fp32 master copy and two moments."""
    return MASTER_BYTES + 2 * MOMENT_BYTES[moments]


def adam_step_bytes(moments: AdamMoments) -> int:
    """Device-memory bytes one Adam step moves per parameter (it is bandwidth-bound)."""
    return ADAM_STEP_FIXED_BYTES + 4 * MOMENT_BYTES[moments]


def stage_params(model: ModelSpec, pp: int) -> tuple[float, ...]:
    """Parameters of each pipeline stage (whole TP group): layers split evenly, the input
    embedding on the first stage, the final norm and output head on the last (tied
    embeddings: the last stage keeps its own copy). pp=1: the whole model."""
    if pp == 1:
        return (model.params,)
    emb = model.vocab * model.hidden
    layers = model.params - emb * (1 if model.tied_embeddings else 2) - model.hidden
    per = layers / pp
    return (per + emb,) + (per,) * (pp - 2) + (per + emb + model.hidden,)


def largest_stage_params(model: ModelSpec, pp: int) -> float:
    """Parameters of the fullest pipeline stage (the whole model at pp=1)."""
    return max(stage_params(model, pp))


def trainer_memory(model: ModelSpec, par: Parallel, algo: AlgoSpec, gpu: GpuSpec,
                   micro_batch_tokens: int | None = None) -> MemoryBreakdown:
    """Peak bytes per device for actor training: the fullest pipeline stage's."""
    stages = trainer_stage_memory(model, par, algo, gpu, micro_batch_tokens)
    return max(stages, key=lambda m: m.total)  # the first of equals


def trainer_stage_memory(model: ModelSpec, par: Parallel, algo: AlgoSpec, gpu: GpuSpec,
                         micro_batch_tokens: int | None = None) -> tuple[MemoryBreakdown, ...]:
    """Bytes per device of each pipeline stage of actor training (one at pp=1)."""
    opt_div = par.dp if algo.distributed_optimizer else 1
    opt_bytes = optimizer_bytes(algo.adam_moments)
    t = micro_batch_tokens or algo.micro_batch_tokens
    layers = model.layers / par.pp
    out = []
    for i, stage in enumerate(stage_params(model, par.pp)):
        params = stage / par.tp
        in_flight = par.pp - i  # 1F1B: stage i holds up to pp - i micro-batches' activations
        if algo.recompute:
            act = (layers * t * model.hidden * RECOMPUTE_BYTES_PER_H * in_flight
                   + t * model.hidden * ACT_BYTES_PER_H)
        else:
            act = layers * t * model.hidden * ACT_BYTES_PER_H * in_flight
        act = act / par.tp  # sequence parallel shards activations over TP
        if i == par.pp - 1:
            act += t * model.vocab * LOGIT_BYTES / par.tp
        out.append(MemoryBreakdown(Role.TRAINER, weights=params * 2, grads=params * GRAD_BYTES,
                                   optimizer=params * opt_bytes / opt_div, activations=act,
                                   kv_cache=0.0, reserve=RUNTIME_RESERVE_GB * GB,
                                   capacity=gpu.hbm_bytes, stage=i, stages=par.pp))
    return tuple(out)


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
