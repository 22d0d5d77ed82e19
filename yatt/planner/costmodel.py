"""Analytic (roofline) cost model implementing `yatt.core.costmodel.CostModel`.

Why: the planner must price thousands of placements without hardware. Each cost is a
roofline term (FLOPs / achievable FLOP/s, or bytes / achievable bandwidth) with named
efficiency factors (`Efficiency`) that `yatt calibrate` fits to measured traces and
`yatt profile` replaces with tables. No coefficient lives inline: hardware numbers come
from the GPU catalog, shapes from the model catalog, efficiencies from `Efficiency`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

from yatt.core.costmodel import CostModel
from yatt.core.limits import MAX_SECONDS, MIN_RATE
from yatt.core.plan import Experiment, Parallel
from yatt.core.release import ReleaseAction, resolve_release
from yatt.core.roles import ReleasePolicy, Role
from yatt.core.schema import spec_field
from yatt.core.specs import AdamMoments, ClusterSpec, ModelSpec

from . import memory

GB = 1e9


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of the catalog's rates, and fixed overheads.

    The catalog's rates are measured ceilings (a large bf16 GEMM, a device-memory read, a
    pinned host copy; `yatt/catalog/gpus.yaml`), not datasheet peaks, so these fractions
    are of what the hardware was seen to do. The decode and prefill defaults were fitted
    on an H200 (`bench/gpu_probe.py`, bench/results/gpu_h200.json); the rest come from
    public numbers, re-based from datasheet peak to the measured ceiling.
    """

    # Megatron-Core reports ~40-47% MFU (of the 989 TF datasheet peak) for dense GPT training
    # on H100 at scale; RL actor training on short, ragged sequences sits at the low end:
    # 0.40 of peak = 0.50 of the measured 791 TF GEMM ceiling.
    train_mfu: float = spec_field(0.50, ge=MIN_RATE, le=1,
                                  help="training FLOP rate, fraction of the GEMM ceiling")
    # Prefill: a forward over many tokens. HF-transformers prefill of a Qwen2.5-7B shape at
    # 128-256 x 512 tokens ran at 0.70 of the ceiling on an H200 (within 3%).
    prefill_mfu: float = spec_field(0.70, ge=MIN_RATE, le=1,
                                    help="prefill FLOP rate, fraction of the GEMM ceiling")
    # Decode at large batch turns compute-bound: 0.52 of the ceiling in the H200 fit of one
    # CUDA-graph decode step (Qwen2.5-1.5B/7B shapes, batch 1-256, context 512/2048).
    decode_mfu: float = spec_field(0.52, ge=MIN_RATE, le=1,
                                   help="decode FLOP rate at large batch, fraction of the GEMM ceiling")
    # Decode streams weights + KV at 0.90 of the measured read bandwidth (same fit).
    decode_bw_eff: float = spec_field(0.90, ge=MIN_RATE, le=1,
                                      help="decode weight+KV streaming, fraction of the memory read ceiling")
    # NCCL ring all-reduce bus bandwidth ~75-80% of link peak (nccl-tests on DGX); the
    # catalog's links are datasheet numbers (the measured device had no NVLink peers).
    comm_eff: float = spec_field(0.75, ge=MIN_RATE, le=1,
                                 help="collective bus bandwidth, fraction of the link bandwidth")
    # The host-link ceiling is one 1 GiB pinned copy (the best case); offloading many tensors
    # of mixed sizes is assumed to reach 90% of it (not measured: calibrate it on a trace).
    host_link_eff: float = spec_field(0.90, ge=MIN_RATE, le=1,
                                      help="offload/reload copies, fraction of the host-link ceiling")
    # Per decode step: scheduler, sampling, detokenisation (vLLM with CUDA graphs ~1-3 ms).
    decode_step_overhead_s: float = spec_field(0.002, ge=0, le=MAX_SECONDS,
                                               help="fixed seconds per decode step (scheduler, sampling)")
    # Per layer and decode step, on top of the bytes and FLOPs: the ~7 kernels of a layer
    # each pay launch/tail latency even replayed from a CUDA graph (H200 fit: 36 us). It
    # dominates small shapes: the 1.5B shape streams 5x fewer bytes per layer than the 7B
    # shape in about the same fixed time.
    decode_layer_s: float = spec_field(36e-6, ge=0, le=MAX_SECONDS,
                                       help="fixed seconds per layer and decode step (kernel latency)")
    # Per collective launch latency (NCCL small-message ~10-20 us).
    comm_latency_s: float = spec_field(15e-6, ge=0, le=MAX_SECONDS,
                                       help="seconds per collective launch")
    # Per training micro-batch launch/data overhead.
    micro_batch_overhead_s: float = spec_field(0.01, ge=0, le=MAX_SECONDS,
                                               help="seconds per training micro-batch")
    # Fixed cost of any phase switch (sleep/wake calls, allocator, barriers).
    switch_overhead_s: float = spec_field(0.5, ge=0, le=MAX_SECONDS,
                                          help="fixed seconds per phase switch (sleep/wake, allocator, barriers)")
    # Creating an inference engine from scratch (TEARDOWN release): process/graph setup.
    engine_start_s: float = spec_field(30.0, ge=0, le=MAX_SECONDS,
                                       help="seconds to create an inference engine (teardown release)")
    # Per-engine fixed cost of a weight update (reload_weights + prefix-cache reset).
    sync_overhead_s: float = spec_field(0.2, ge=0, le=MAX_SECONDS,
                                        help="fixed seconds per engine weight update")
    # Checkpoint write bandwidth per node to shared storage.
    ckpt_gbps_per_node: float = spec_field(2.0, ge=MIN_RATE,
                                           help="checkpoint write bandwidth per node, GB/s")
    # One controller process (de)serialising sample payloads.
    controller_gbps: float = spec_field(1.0, ge=MIN_RATE,
                                        help="one controller's (de)serialisation bandwidth, GB/s")
    controller_per_sample_s: float = spec_field(2e-5, ge=0, le=MAX_SECONDS,
                                                help="controller seconds per sample")

    def with_(self, **kw: float) -> "Efficiency":
        return replace(self, **kw)


def _lin(a: float, b: float, lo: int, hi: int) -> float:
    """sum_{i=lo}^{hi-1} (a + b*i)."""
    n = hi - lo
    return a * n + b * (lo + hi - 1) * n / 2.0 if n > 0 else 0.0


def _sum_max_linear(a1: float, b1: float, a2: float, b2: float, k: int) -> float:
    """sum_{i=0}^{k-1} max(a1 + b1*i, a2 + b2*i), exactly."""
    if k <= 0:
        return 0.0
    if b1 == b2:
        return _lin(max(a1, a2), b1, 0, k)
    if b1 < b2:  # make f1 the steeper line
        a1, b1, a2, b2 = a2, b2, a1, b1
    # f1 - f2 grows with i; it is >= 0 from i >= x on, with x the crossover point.
    x = (a2 - a1) / (b1 - b2)   # +-inf when the slopes differ by a subnormal amount
    cut = k if x >= k else (0 if x <= 0 else math.ceil(x))
    return _lin(a2, b2, 0, cut) + _lin(a1, b1, cut, k)


class AnalyticCostModel(CostModel):
    """Roofline costs for one cluster. See `Efficiency` for the tunable factors."""

    def __init__(self, cluster: ClusterSpec, eff: Efficiency | None = None, *,
                 recompute: bool = False, micro_batch_tokens: int = 16384,
                 adam_moments: AdamMoments = AdamMoments.FP32) -> None:
        self.cluster = cluster
        self.gpu = cluster.gpu
        self.eff = eff or Efficiency()
        self.recompute = recompute
        self.micro_batch_tokens = micro_batch_tokens
        self.adam_moments = adam_moments
        self._decode_cache: dict[tuple[ModelSpec, int], tuple[float, ...]] = {}
        self._unit_by_id: dict[tuple[int, int], tuple[ModelSpec, tuple[float, ...]]] = {}

    @classmethod
    def for_experiment(cls, exp: Experiment, eff: Efficiency | None = None) -> "AnalyticCostModel":
        """Cost model for an experiment's cluster, with its recompute, micro-batch and
        optimizer-state choices."""
        return cls(exp.cluster, eff, recompute=exp.algo.recompute,
                   micro_batch_tokens=exp.algo.micro_batch_tokens,
                   adam_moments=exp.algo.adam_moments)

    # ---- helpers ---------------------------------------------------------------------
    @staticmethod
    def compute_params(model: ModelSpec) -> float:
        """Parameters that cost FLOPs per token: all but the input embedding lookup."""
        return model.non_embedding_params + model.vocab * model.hidden

    def _peak(self) -> float:
        return self.gpu.bf16_tflops * 1e12

    def _link(self, devices: int) -> float:
        """Achievable collective bandwidth (B/s) for a group of `devices` contiguous devices."""
        gbps = self.gpu.intra_node_gbps if devices <= self.cluster.gpus_per_node else self.gpu.inter_node_gbps
        return gbps * GB * self.eff.comm_eff

    def allreduce_time(self, nbytes: float, n: int, calls: int = 1) -> float:
        """Ring all-reduce of `nbytes` over `n` contiguous devices, `calls` launches."""
        if n <= 1:
            return 0.0
        return 2.0 * (n - 1) / n * nbytes / self._link(n) + calls * self.eff.comm_latency_s

    def _train_flops(self, model: ModelSpec, s: float) -> float:
        return 6.0 * self.compute_params(model) * s + 6.0 * model.layers * model.hidden * s * s

    # ---- training --------------------------------------------------------------------
    def train_flops_per_token(self, model: ModelSpec, seq_len: int = 1) -> float:
        return self._train_flops(model, seq_len) / seq_len

    def train_time(self, model: ModelSpec, seq_lens: Sequence[int], par: Parallel) -> float:
        return self.pass_time(model, seq_lens, par, self.recompute)

    def pass_time(self, model: ModelSpec, seq_lens: Sequence[int], par: Parallel,
                  recompute: bool) -> float:
        """Forward+backward of these sequences on one DP rank at this TP/PP (`recompute`:
        one extra forward), micro-batch overheads and TP/PP communication included."""
        if not len(seq_lens):
            return 0.0
        micro_batch_tokens = self.micro_batch_tokens
        flops = sum(self._train_flops(model, float(s)) for s in seq_lens)
        if recompute:
            flops *= 4.0 / 3.0  # one extra forward
        tokens = float(sum(seq_lens))
        micro = max(1.0, -(-tokens // micro_batch_tokens))
        bubble = 1.0 + (par.pp - 1) / micro
        if par.pp > 1:
            # the pipeline runs at its slowest stage: the last, with its share of the
            # layers plus the output head (6 FLOPs per token per head parameter)
            head = 6.0 * model.vocab * model.hidden * tokens * (4.0 / 3.0 if recompute else 1.0)
            flops = ((flops - head) / par.pp + head) * par.pp
        compute = flops / (par.tp * par.pp * self._peak() * self.eff.train_mfu) * bubble
        # TP: 2 all-reduces forward + 2 backward per layer on the activations (bf16).
        tp_comm = self.allreduce_time(4 * tokens * model.hidden * 2 * model.layers / par.pp, par.tp,
                                  calls=int(4 * model.layers / par.pp * micro))
        pp_comm = self.pp_p2p_time(model, tokens, micro, par)
        return compute + tp_comm + pp_comm + micro * self.eff.micro_batch_overhead_s

    def pp_link_gbps(self, par: Parallel) -> float:
        """Per-device bandwidth of the slowest stage-to-stage hop of one pipeline: a replica
        is tp*pp consecutive devices from a node's start, stage s its s-th TP group, so the
        hop into stage s crosses nodes when stage s starts a node."""
        gpn = self.cluster.gpus_per_node
        cross = any((s * par.tp) % gpn == 0 for s in range(1, par.pp))
        return self.gpu.inter_node_gbps if cross else self.gpu.intra_node_gbps

    def pp_p2p_time(self, model: ModelSpec, tokens: float, micro: float, par: Parallel) -> float:
        """Stage-to-stage sends of a 1F1B pipeline (0 at pp=1). Every pipeline slot (micro
        + pp - 1 of them) passes one micro-batch's activations forward and its gradients
        back; with sequence parallelism each TP rank sends its 1/tp slice (bf16) over its
        own link, and the slowest hop paces the pipeline."""
        if par.pp == 1:
            return 0.0
        nbytes = tokens / micro * model.hidden * 2 / par.tp
        one = nbytes / (self.pp_link_gbps(par) * GB * self.eff.comm_eff) + self.eff.comm_latency_s
        return 2.0 * (micro + par.pp - 1) * one

    def _shard_params(self, model: ModelSpec, par: Parallel) -> float:
        """Parameters on one device of the fullest pipeline stage."""
        if par.pp == 1:
            return model.params / (par.tp * par.pp)
        return memory.largest_stage_params(model, par.pp) / par.tp

    def grad_sync_time(self, model: ModelSpec, par: Parallel) -> float:
        """One optimizer step: the DP gradient reduction and the Adam step (the simulator
        asks once per mini-batch of each PPO epoch)."""
        shard = self._shard_params(model, par)
        grad_bytes = shard * 2  # bf16 gradient reduction
        # DP ranks of one TP shard sit tp*pp devices apart: the group spans nodes when the
        # whole trainer does.
        n = par.dp
        span = par.world
        comm = 0.0
        if n > 1:
            comm = 2.0 * (n - 1) / n * grad_bytes / self._link(span) + self.eff.comm_latency_s
        # The Adam step is memory-bound: `memory.adam_step_bytes` per parameter of the shard.
        opt = (shard / n * memory.adam_step_bytes(self.adam_moments)
               / (self.gpu.hbm_gbps * GB * self.eff.decode_bw_eff))
        return comm + opt

    def logprob_time(self, model: ModelSpec, seq_lens: Sequence[int], par: Parallel) -> float:
        # forward only: a third of the training FLOPs (no recompute)
        return self.pass_time(model, seq_lens, par, recompute=False) / 3.0

    # ---- inference -------------------------------------------------------------------
    def prefill_time(self, model: ModelSpec, tp: int, tokens: int) -> float:
        if tokens <= 0:
            return 0.0
        flops = 2.0 * self.compute_params(model) * tokens + 2.0 * model.layers * model.hidden * tokens * tokens
        comm = self.allreduce_time(2 * tokens * model.hidden * 2 * model.layers, tp, calls=2 * model.layers)
        return flops / (tp * self._peak() * self.eff.prefill_mfu) + comm

    def _decode_unit(self, model: ModelSpec, tp: int) -> tuple[float, float, float, float, float, float]:
        """Batch-independent decode coefficients, cached per (model, tp): the simulator asks
        for decode times tens of thousands of times per run."""
        key = (model, tp)
        hit = self._decode_cache.get(key)
        if hit is not None:
            return hit
        peak = tp * self._peak() * self.eff.decode_mfu
        bw = self.gpu.hbm_gbps * GB * self.eff.decode_bw_eff
        per_seq_comm = self.allreduce_time(2 * model.hidden * 2 * model.layers, tp, calls=0)
        fixed0 = (self.allreduce_time(0.0, tp, calls=2 * model.layers) + self.eff.decode_step_overhead_s
                  + model.layers * self.eff.decode_layer_s)
        unit = (2.0 * self.compute_params(model) / peak, 4.0 * model.layers * model.hidden / peak,
                memory.engine_weight_bytes(model, tp) / bw,
                memory.kv_bytes_per_token_per_device(model, tp) / bw, per_seq_comm, fixed0)
        self._decode_cache[key] = unit
        return unit

    def _decode_coeffs(self, model: ModelSpec, tp: int, batch: int) -> tuple[float, float, float, float, float]:
        """Per-step compute = ac + bc*ctx_sum; memory = am + bm*ctx_sum; fixed = comm+overhead."""
        ac1, bc, am, bm, comm1, fixed0 = self._decode_unit(model, tp)
        return ac1 * batch, bc, am, bm, comm1 * batch + fixed0

    def decode_step_time(self, model: ModelSpec, tp: int, batch: int, mean_ctx: float) -> float:
        if batch <= 0:
            return 0.0
        ac, bc, am, bm, fixed = self._decode_coeffs(model, tp, batch)
        c = mean_ctx * batch
        return max(ac + bc * c, am + bm * c) + fixed

    def decode_time(self, model: ModelSpec, tp: int, batch: int, ctx_sum: float, steps: int) -> float:
        if batch <= 0 or steps <= 0:
            return 0.0
        # the simulator's hot path: the (model, tp) coefficients by identity, not by the
        # spec's field-by-field hash (the same numbers as `_decode_coeffs`)
        hit = self._unit_by_id.get((id(model), tp))
        if hit is None or hit[0] is not model:
            hit = self._unit_by_id[(id(model), tp)] = (model, self._decode_unit(model, tp))
        ac1, bc, am, bm, comm1, fixed0 = hit[1]
        ac, fixed = ac1 * batch, comm1 * batch + fixed0
        # step i has context ctx_sum + i*batch: both terms are linear in i.
        return _sum_max_linear(ac + bc * ctx_sum, bc * batch, am + bm * ctx_sum, bm * batch,
                               steps) + fixed * steps

    def kv_capacity_tokens(self, model: ModelSpec, tp: int, mem_util: float) -> int:
        kv = memory.engine_kv_bytes(model, tp, self.gpu, mem_util)
        return int(kv // memory.kv_bytes_per_token_per_device(model, tp))

    def genrm_score_time(self, model: ModelSpec, tp: int, input_tokens: int, output_tokens: int) -> float:
        """One judgment alone on an idle engine: prefill, then a short decode."""
        return (self.prefill_time(model, tp, input_tokens)
                + self.decode_time(model, tp, 1, input_tokens, output_tokens))

    # ---- phase switches --------------------------------------------------------------
    def _state_bytes(self, model: ModelSpec, role: Role, par: Parallel) -> float:
        """Per-device bytes a role moves to/from host when it offloads."""
        if role is Role.TRAINER:
            # weights + grads + distributed-optimizer shard, of the fullest pipeline stage
            opt = memory.optimizer_bytes(self.adam_moments)
            return self._shard_params(model, par) * (2 + memory.GRAD_BYTES + opt / par.dp)
        return model.params / (par.tp * par.pp) * model.dtype_bytes  # engines / reference: weights

    def _host_copy(self, nbytes: float) -> float:
        return nbytes / (self.gpu.host_link_gbps * GB * self.eff.host_link_eff)

    @staticmethod
    def release_action(role: Role, release: ReleasePolicy) -> ReleaseAction:
        """What `role` does under `release` on the devices this model prices: GPUs, where an
        engine can sleep and OFFLOAD is a copy over the host link."""
        return resolve_release(release, role, cpu=False)

    def offload_time(self, model: ModelSpec, role: Role, par: Parallel, release: ReleasePolicy) -> float:
        action = self.release_action(role, release)
        if action is ReleaseAction.KEEP:
            return 0.0
        if action is ReleaseAction.TEARDOWN:
            return self.eff.switch_overhead_s  # destroy: nothing is copied
        return self._host_copy(self._state_bytes(model, role, par)) + self.eff.switch_overhead_s

    def reload_time(self, model: ModelSpec, role: Role, par: Parallel, release: ReleasePolicy) -> float:
        action = self.release_action(role, release)
        if action is ReleaseAction.KEEP:
            return 0.0
        load = self._host_copy(self._state_bytes(model, role, par)) + self.eff.switch_overhead_s
        if action is ReleaseAction.TEARDOWN:
            load += self.eff.engine_start_s  # re-create the engine, then load its weights
        return load

    def weight_sync_time(self, model: ModelSpec, trainer: Parallel, rollout_tp: int,
                         rollout_engines: int, cross_node: bool) -> float:
        nbytes = float(model.weight_bytes)
        gbps = self.gpu.inter_node_gbps if cross_node else self.gpu.intra_node_gbps
        # gather TP/PP shards, then a pipelined broadcast: ~bytes/bw regardless of engines
        # engines apply the update in parallel: one fixed overhead
        return nbytes / (gbps * GB * self.eff.comm_eff) + self.eff.sync_overhead_s

    def checkpoint_time(self, model: ModelSpec, par: Parallel) -> float:
        nbytes = model.params * (2 + memory.optimizer_bytes(self.adam_moments))
        nodes = max(1, -(-par.world // self.cluster.gpus_per_node))
        return nbytes / (self.eff.ckpt_gbps_per_node * GB * nodes)

    def controller_time(self, samples: int, bytes_per_sample: float, controllers: int) -> float:
        k = max(1, controllers)
        return (samples * bytes_per_sample / (self.eff.controller_gbps * GB * k)
                + samples * self.eff.controller_per_sample_s / k)
