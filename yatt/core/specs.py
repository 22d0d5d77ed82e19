"""Frozen, typed specs for hardware, models, workloads and algorithms.

Why: these are the nouns every package shares. They are frozen so a spec handed from
the planner to the simulator or the executor cannot be mutated underneath either, and
they validate themselves (ranges via `spec_field`, cross-field rules in `__post_init__`)
so an impossible spec never gets past loading.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import Enum
from typing import Optional

import numpy as np

from .errors import InputError
from .limits import (MAX_EPOCHS, MAX_GPUS, MAX_GPUS_PER_NODE, MAX_LIST,
                     MAX_MODEL_DIM, MAX_PAYLOAD_BYTES, MAX_RESAMPLE_ROUNDS, MAX_SAMPLES_PER_PROMPT,
                     MAX_SAMPLES_PER_STEP, MAX_SECONDS, MAX_STEPS, MAX_TOKENS, MIN_RATE)
from .roles import AlgoName, DistKind, RewardSource
from .schema import spec_field


class KLEstimator(str, Enum):
    """Per-token estimator of KL(pi || pi_ref) (Schulman, "Approximating KL divergence")."""

    K1 = "k1"   # log pi - log pi_ref: unbiased, can be negative per token
    K3 = "k3"   # exp(r) - r - 1 with r = log pi_ref - log pi: unbiased, always >= 0


class LrSchedule(str, Enum):
    CONSTANT = "constant"   # lr after the (optional) linear warmup
    COSINE = "cosine"       # linear warmup, then cosine decay to lr * lr_min_ratio at the last step


class OldLogprobs(str, Enum):
    """Where the PPO ratio's old (pre-update) log-probs come from."""

    REUSE = "reuse"          # each sequence's first forward in training (no extra pass)
    RECOMPUTE = "recompute"  # a forward pass of the actor over the whole batch before training


class AdamMoments(str, Enum):
    """The dtype of Adam's two moments (exp_avg, exp_avg_sq); the master weights stay fp32."""

    FP32 = "fp32"  # Megatron-Core's default: 12 B/param of optimizer state
    BF16 = "bf16"  # its precision-aware optimizer (exp_avg/exp_avg_sq_dtype bf16): 8 B/param


class CkptWriter(str, Enum):
    """Who writes an asynchronous checkpoint's shards while training goes on."""

    AUTO = "auto"        # a thread on CPU trainers, a forked process on GPUs
    THREAD = "thread"    # a thread of the trainer's process (tensors copied to host first)
    PROCESS = "process"  # megatron's forked writer process

    def thread(self, cpu: bool) -> bool:
        """Whether a trainer on CPU (`cpu`) or a GPU writes from a thread."""
        return self is CkptWriter.THREAD or (self is CkptWriter.AUTO and cpu)


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator kind. Bandwidths are per device, one direction, in GB/s (1e9 B/s).
    Rates are achievable ceilings (measured, or datasheet x measured ratio: gpus.yaml)."""

    name: str = spec_field(help="GPU kind, e.g. H200 (the catalog key; `cpu-local` for CPU devices)")
    bf16_tflops: float = spec_field(ge=MIN_RATE, help="dense bf16 TFLOP/s a large GEMM reaches")
    hbm_gb: float = spec_field(ge=MIN_RATE, help="device memory, GB")
    hbm_gbps: float = spec_field(ge=MIN_RATE, help="device memory read bandwidth reached, GB/s")
    intra_node_gbps: float = spec_field(ge=MIN_RATE, help="NVLink/PCIe peer bandwidth per device, GB/s")
    inter_node_gbps: float = spec_field(ge=MIN_RATE, help="network bandwidth per device, GB/s")
    host_link_gbps: float = spec_field(ge=MIN_RATE, help="pinned device<->host copy bandwidth reached, GB/s")
    source: str = spec_field("", help="where the numbers come from (measurement or datasheet)")

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gb * 1e9


@dataclass(frozen=True)
class ClusterSpec:
    gpu: GpuSpec = spec_field(help="GPU kind: a catalog name (yatt/catalog/gpus.yaml), a path to a "
                                     "GPU .yaml, or an inline mapping")
    nodes: int = spec_field(1, ge=1, le=MAX_GPUS, help="number of nodes")
    gpus_per_node: int = spec_field(8, ge=1, le=MAX_GPUS_PER_NODE,
                                    help="devices per node; a TP group never spans nodes")
    name: str = spec_field("", help="label shown in tables")

    def __post_init__(self) -> None:
        if self.nodes * self.gpus_per_node > MAX_GPUS:
            raise InputError(f"{self.nodes} nodes x {self.gpus_per_node} GPUs per node = "
                             f"{self.nodes * self.gpus_per_node:,} GPUs; allowed: at most "
                             f"{MAX_GPUS:,} GPUs in a cluster", field="nodes")

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_of(self, device: int) -> int:
        return device // self.gpus_per_node


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape (Qwen2/Llama family: GQA, SwiGLU, RMSNorm)."""

    name: str = spec_field(help="model name (the catalog key for catalog models)")
    layers: int = spec_field(ge=1, le=MAX_MODEL_DIM, help="transformer layers")
    hidden: int = spec_field(ge=1, le=MAX_MODEL_DIM, help="hidden size")
    intermediate: int = spec_field(ge=1, le=MAX_MODEL_DIM, help="MLP (SwiGLU) intermediate size")
    heads: int = spec_field(ge=1, le=MAX_MODEL_DIM, help="attention heads")
    kv_heads: int = spec_field(ge=1, le=MAX_MODEL_DIM, help="key/value heads (GQA); must divide heads")
    vocab: int = spec_field(ge=1, le=MAX_MODEL_DIM, help="vocabulary size")
    tied_embeddings: bool = spec_field(False, help="input and output embeddings share weights")
    head_dim: int = spec_field(0, ge=0, le=MAX_MODEL_DIM, help="0 = hidden // heads")
    qkv_bias: bool = spec_field(True, help="Q/K/V projections have a bias (Qwen2: yes, Llama: no)")
    dtype_bytes: int = spec_field(2, ge=1, le=8, help="bytes per weight and KV element (2: bf16)")
    published_params: float = spec_field(0.0, ge=0, help="published parameter count, for checks")
    hf_path: str = spec_field("", help="HF checkpoint directory the executor loads (relative to the "
                                       "model YAML); empty: the executor builds a random-init one")
    source: str = spec_field("", help="where the shape comes from")

    def __post_init__(self) -> None:
        if self.heads % self.kv_heads:
            raise InputError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})",
                             field="kv_heads")
        if self.head_dim == 0 and self.hidden % self.heads:
            raise InputError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads}) "
                             "or head_dim must be given", field="head_dim")

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @functools.cached_property
    def shape_key(self) -> str:
        """The fields that set this model's compute and memory, as one string: two models
        with equal keys (another name, other weights) cost the same per token. Cached: the
        profiled cost model looks a model's tables up by it on every call."""
        return (f"layers={self.layers} hidden={self.hidden} intermediate={self.intermediate} "
                f"heads={self.heads}/{self.kv_heads} head_dim={self.dim_head} vocab={self.vocab} "
                f"tied={int(self.tied_embeddings)} qkv_bias={int(self.qkv_bias)} "
                f"dtype_bytes={self.dtype_bytes}")

    @functools.cached_property
    def params(self) -> int:
        """Parameter count derived from the shape (embeddings included). Cached: cost
        models call it in their inner loops."""
        h, d = self.hidden, self.dim_head
        q = h * self.heads * d
        kv = 2 * h * self.kv_heads * d
        o = self.heads * d * h
        bias = (self.heads * d + 2 * self.kv_heads * d) if self.qkv_bias else 0
        mlp = 3 * h * self.intermediate
        norms = 2 * h
        per_layer = q + kv + o + bias + mlp + norms
        emb = self.vocab * h * (1 if self.tied_embeddings else 2)
        return self.layers * per_layer + emb + h

    @functools.cached_property
    def non_embedding_params(self) -> int:
        return self.params - self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V bytes per token over all layers (whole model, before TP sharding)."""
        return 2 * self.layers * self.kv_heads * self.dim_head * self.dtype_bytes

    @property
    def weight_bytes(self) -> int:
        return self.params * self.dtype_bytes

    def check_tp(self, tp: int) -> Optional[str]:
        """Why this TP size is invalid for the model, or None if it is fine."""
        if self.heads % tp:
            return f"TP={tp} does not divide {self.name}'s {self.heads} attention heads"
        if self.kv_heads % tp and tp % self.kv_heads:
            return f"TP={tp} and {self.name}'s {self.kv_heads} KV heads do not divide each other"
        return None


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution, with optional heavy tail and hard cap.

    const: `value`. uniform: [min, max]. lognormal: median `value`, shape `sigma` (required:
    no default shape), clipped to [min, max]. empirical: `values` sampled with `weights` (a
    histogram from a real run).
    """

    kind: DistKind = spec_field(DistKind.CONST, help="distribution shape")
    value: float = spec_field(0.0, ge=0, le=MAX_TOKENS, help="const value, or lognormal median (not the mean)")
    sigma: Optional[float] = spec_field(None, ge=0, le=5,
                                        help="lognormal only, required: std of log(length), e.g. 0.5")
    min: int = spec_field(1, ge=0, le=MAX_TOKENS, help="lower clip (uniform: lower bound)")
    max: int = spec_field(1_000_000, ge=1, le=MAX_TOKENS, help="upper clip, the cap (uniform: upper bound)")
    values: tuple[int, ...] = spec_field((), help="empirical: the lengths")
    weights: tuple[float, ...] = spec_field((), help="empirical: their weights (empty: equal)")

    def __post_init__(self) -> None:
        if self.min > self.max:
            raise InputError(f"min ({self.min}) must be <= max ({self.max})", field="min")
        if self.kind is DistKind.EMPIRICAL:
            if not self.values:
                raise InputError("empirical distribution needs a non-empty list", field="values")
            for i, v in enumerate(self.values):
                if not 0 <= v <= MAX_TOKENS:
                    raise InputError(f"got {v}; allowed: a length >= 0 and <= {MAX_TOKENS}",
                                     field=f"values[{i}]")
            if self.weights and len(self.weights) != len(self.values):
                raise InputError(f"needs {len(self.values)} weights to match values, got "
                                 f"{len(self.weights)}", field="weights")
            if any(w < 0 for w in self.weights) or (self.weights and sum(self.weights) <= 0):
                raise InputError("weights must be >= 0 with a positive sum", field="weights")
        elif self.kind in (DistKind.CONST, DistKind.LOGNORMAL) and self.value <= 0:
            raise InputError(f"got {self.value!r}; allowed: a number > 0 for kind "
                             f"{self.kind.value}", field="value")
        if self.kind is DistKind.LOGNORMAL and self.sigma is None:
            raise InputError("missing; lognormal needs `sigma` (std of log(length)); allowed: "
                             "a number in [0, 5], e.g. 0.5", field="sigma")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n integer lengths (>= 1 unless min is 0)."""
        if self.kind is DistKind.CONST:
            out = np.full(n, self.value)
        elif self.kind is DistKind.UNIFORM:
            out = rng.integers(self.min, self.max + 1, size=n)
        elif self.kind is DistKind.LOGNORMAL:
            out = rng.lognormal(math.log(self.value), self.sigma, size=n)
        else:
            p = None
            if self.weights:
                w = np.asarray(self.weights, float)
                p = w / w.sum()
            out = rng.choice(np.asarray(self.values), size=n, p=p)
        return np.clip(np.rint(out), self.min, self.max).astype(np.int64)

    def upper(self) -> int:
        """The largest length this distribution can produce."""
        if self.kind is DistKind.CONST:
            return int(np.clip(round(self.value), self.min, self.max))
        if self.kind is DistKind.EMPIRICAL:
            return int(np.clip(max(self.values), self.min, self.max))
        return self.max

    def mean(self) -> float:
        """Expected value (by a fixed-seed Monte Carlo for clipped shapes)."""
        if self.kind is DistKind.CONST:
            return float(np.clip(round(self.value), self.min, self.max))
        return float(self.sample(np.random.default_rng(0), 20000).mean())


@dataclass(frozen=True)
class Workload:
    """What one RL step processes."""

    prompts_per_step: int = spec_field(ge=1, le=MAX_SAMPLES_PER_STEP, help="prompts per RL step")
    samples_per_prompt: int = spec_field(ge=1, le=MAX_SAMPLES_PER_PROMPT,
                                         help="responses per prompt (the GRPO group size)")
    prompt_len: LengthDist = spec_field(LengthDist(DistKind.CONST, 256), help="prompt tokens")
    response_len: LengthDist = spec_field(LengthDist(DistKind.CONST, 512),
                                          help="response token budget (the engine's max_tokens)")
    # A response is min(budget, stop). `yatt profile` measures the actor's stop lengths on
    # the config's task; the planner uses those when this is unset.
    stop_len: Optional[LengthDist] = spec_field(
        None, help="where the policy ends a response with EOS; a response is min(budget, stop). "
                   "null: the profile's measured stop lengths, else every response runs to its budget")
    genrm_template_tokens: int = spec_field(64, ge=0, le=MAX_TOKENS,
                                            help="judging-prompt overhead per sample")
    genrm_output_len: LengthDist = spec_field(LengthDist(DistKind.CONST, 64),
                                              help="GenRM verdict tokens; the executor's judge budget is its "
                                                   "mean clamped to 4..64")
    dynamic_sampling: bool = spec_field(False, help="DAPO: drop groups whose rewards are all equal and "
                                               "generate replacement groups (needs samples_per_prompt >= 2)")
    all_equal_prob: float = spec_field(0.0, ge=0, lt=1, help="simulator only: P(a group's rewards all "
                                                              "equal); the executor uses real rewards")
    max_resample_rounds: int = spec_field(3, ge=0, le=MAX_RESAMPLE_ROUNDS,
                                          help="dynamic sampling: extra generation rounds per step")
    response_growth_per_step: float = spec_field(0.0, ge=-0.5, le=1.0,
                                                 help="relative growth of response lengths per step")
    sample_payload_bytes: int = spec_field(0, ge=0, le=MAX_PAYLOAD_BYTES,
                                           help="extra bytes per prompt (e.g. images)")

    def __post_init__(self) -> None:
        n = self.prompts_per_step * self.samples_per_prompt
        if n > MAX_SAMPLES_PER_STEP:
            raise InputError(f"{self.prompts_per_step:,} prompts x {self.samples_per_prompt:,} "
                             f"samples = {n:,} samples per step; allowed: at most "
                             f"{MAX_SAMPLES_PER_STEP:,}", field="prompts_per_step")

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt

    @property
    def expected_requests(self) -> float:
        """Responses generated per step on average: with dynamic sampling, each round
        regenerates the groups whose rewards all agreed (probability all_equal_prob)."""
        if not self.dynamic_sampling or self.all_equal_prob <= 0:
            return float(self.samples_per_step)
        p = self.all_equal_prob
        return self.samples_per_step * sum(p ** k for k in range(self.max_resample_rounds + 1))

    @property
    def judge_max_tokens(self) -> int:
        """The GenRM's token budget per judgment in the executor: the mean output length,
        clamped to 4..64 (a verdict needs a few tokens; 64 bounds a rambling judge)."""
        return max(4, min(64, int(self.genrm_output_len.mean())))


@dataclass(frozen=True)
class AlgoSpec:
    name: AlgoName = spec_field(AlgoName.GRPO, help="label only: both use group-relative advantages "
                                                    "and the PPO-clip loss (no critic)")
    ppo_epochs: int = spec_field(1, ge=1, le=MAX_EPOCHS, help="optimizer passes over each step's batch")
    micro_batch_tokens: int = spec_field(16384, ge=1, le=MAX_TOKENS, help="tokens per training micro-batch")
    lr: float = spec_field(1e-6, gt=0, help="Adam learning rate (peak, after warmup)")
    kl_coef: float = spec_field(0.2, ge=0, help="weight of the KL(pi || pi_ref) penalty in the loss")
    entropy_coef: float = spec_field(0.1, ge=0, help="weight of the entropy bonus in the loss")
    clip_eps: float = spec_field(0.2, gt=0, lt=1, help="PPO clip range: ratio kept in [1-eps, 1+eps]")
    use_reference: bool = spec_field(True, help="keep a frozen reference policy for the KL term")
    reward: RewardSource = spec_field(RewardSource.GENRM, help="genrm: the GenRM's verdict; rule: the "
                                                               "task's exact checker")
    temperature: float = spec_field(1.0, ge=0, help="rollout sampling temperature")
    recompute: bool = spec_field(True, help="planner: activation recompute in the memory and cost "
                                            "model (the executor's trainer does not recompute)")
    distributed_optimizer: bool = spec_field(True, help="shard Adam state over DP ranks (its "
                                                        "checkpoints reload at another DP size, "
                                                        "not another TP or PP)")
    # --- RL algorithm details (yatt/exec/algo.py; docs/rl-algorithm.md)
    adv_std: bool = spec_field(True, help="GRPO: divide the advantage by the prompt group's reward std")
    reward_norm: bool = spec_field(False, help="normalise rewards batch-wide, (r - mean) / std, "
                                               "before the group advantage")
    dual_clip: float = spec_field(0.0, ge=0, help="dual-clip constant c > 1 for A < 0 (0 = off)")
    behaviour_is_cap: float = spec_field(2.0, ge=1, le=1e6,
                                         help="async: the loss is weighted per token by "
                                              "min(pi_old / pi_behaviour, cap), pi_behaviour "
                                              "being the stale weights that sampled it")
    kl_estimator: KLEstimator = spec_field(KLEstimator.K3, help="k3: exp(q) - q - 1 with q = log pi_ref "
                                                              "- log pi (>= 0); k1: log pi - log pi_ref")
    lr_schedule: LrSchedule = spec_field(LrSchedule.CONSTANT, help="after warmup: constant, or cosine "
                                                                   "down to lr * lr_min_ratio at the last step")
    lr_warmup_steps: int = spec_field(0, ge=0, le=MAX_STEPS, help="linear warmup steps")
    lr_min_ratio: float = spec_field(0.1, ge=0, le=1, help="cosine floor, as a fraction of lr")
    seq_len_batching: bool = spec_field(False, help="WeChat-YATT: sequences per micro-batch from the "
                                                    "longest length (<= 512: 32, <= 1024: 16, else 8)")
    adaptive_accept: bool = spec_field(False, help="WeChat-YATT: from the 2nd epoch on, keep 100/70/50% "
                                                   "of sequences by the clipped-token ratio")
    mini_batches: int = spec_field(1, ge=1, le=MAX_EPOCHS, help="optimizer steps per PPO epoch: the step's batch "
                                   "is split into this many mini-batches (verl's ppo_mini_batch_size); "
                                   "yatt run needs old_logprobs: recompute for > 1")
    # reuse costs no pass in the planner: old log-probs that already exist (verl can take the
    # rollout's). The executor's reuse is each sequence's first forward in training, which
    # is the sampling policy's only before the first optimizer step, so `check_runnable`
    # refuses reuse with mini_batches > 1 (from the second mini-batch on it would give
    # ratio 1 against already-updated weights, no correction for the earlier updates)
    old_logprobs: OldLogprobs = spec_field(OldLogprobs.REUSE, help="the PPO ratio's old log-probs: "
                                           "reuse (no extra pass; the executor takes each sequence's "
                                           "first training forward, so yatt run needs mini_batches: "
                                           "1), or recompute them in a forward pass over the batch "
                                           "before the first update")
    adam_moments: AdamMoments = spec_field(AdamMoments.FP32, help="precision of Adam's two moments: "
                                           "fp32 (12 B/param of optimizer state) or bf16 (8 B/param, "
                                           "planned only: the executor keeps fp32)")

    def __post_init__(self) -> None:
        if self.dual_clip and self.dual_clip <= 1.0:
            raise InputError(f"got {self.dual_clip!r}; allowed: 0 (off) or a number > 1",
                             field="dual_clip")


@dataclass(frozen=True)
class EngineSpec:
    """Inference-engine settings shared by rollout and GenRM (vLLM semantics)."""

    max_num_seqs: int = spec_field(256, ge=1, le=MAX_SAMPLES_PER_STEP, help="rollout engine: most sequences in its running batch")
    gpu_memory_utilization: float = spec_field(0.85, gt=0, le=1, help="share of device memory an engine "
                                                                      "may use (weights + KV pool)")
    genrm_max_num_seqs: int = spec_field(256, ge=1, le=MAX_SAMPLES_PER_STEP, help="GenRM engine: most sequences in its running batch")
    queue_capacity: int = spec_field(4096, ge=1, le=MAX_SAMPLES_PER_STEP, help="bounded rollout->GenRM queue, in samples (partial colocate; "
                                                "the executor caps it at 1024)")


@dataclass(frozen=True)
class CheckpointSpec:
    """When the executor checkpoints and how it survives faults (docs/reliability.md).

    Saves happen after a step completes: every `every_steps` steps, when `every_minutes`
    have passed since the last save, and after each step listed in `at_steps` (0 turns a
    trigger off), and after the run's last step unless `final` is false. The trainer's
    write is asynchronous; `keep_last` sealed checkpoints are kept. A dead actor is restarted up to `max_restarts` times per run and the step is
    redone; `max_nonfinite_steps` consecutive steps with a non-finite loss or gradient
    stop the run. A checkpoint that cannot be written is removed (the previous one stays
    the newest) and the run goes on, or stops if `required`. On SIGTERM or SIGINT the run
    checkpoints its last good step and exits 0 (`preempt_grace_s`: the grace period before
    the cluster's SIGKILL). When a node is lost, the run waits `node_wait_s` for capacity.
    """

    every_steps: int = spec_field(10, ge=0, le=MAX_STEPS, help="checkpoint every N completed steps (0: off)")
    every_minutes: float = spec_field(30.0, ge=0, le=MAX_SECONDS / 60, help="checkpoint when this many minutes passed since "
                                                       "the last one (0: off)")
    at_steps: tuple[int, ...] = spec_field((), help="also checkpoint after these steps")
    keep_last: int = spec_field(2, ge=1, le=MAX_LIST, help="sealed checkpoints kept (older ones are deleted)")
    async_save: bool = spec_field(True, help="write the trainer's shards in the background while "
                                             "training goes on")
    writer: CkptWriter = spec_field(CkptWriter.AUTO, help="who writes an asynchronous save: auto (a "
                                    "thread on CPU, a forked process on GPU), thread, process")
    max_restarts: int = spec_field(3, ge=0, le=MAX_STEPS, help="actor restarts per run (step redone)")
    max_nonfinite_steps: int = spec_field(3, ge=1, le=MAX_STEPS, help="consecutive non-finite steps that stop the run")
    final: bool = spec_field(True, help="also save after the run's last step (what `yatt export` reads)")
    required: bool = spec_field(False, help="a checkpoint that cannot be written (a full disk) stops "
                                            "the run; false: one warning line and the run goes on")
    preempt_grace_s: float = spec_field(30.0, gt=0, le=86400.0,
                                        help="on SIGTERM/SIGINT: seconds until the cluster's SIGKILL; "
                                             "the step in progress gets half to finish, then the "
                                             "last good step is checkpointed and the run exits 0")
    node_wait_s: float = spec_field(600.0, ge=0, le=86400.0,
                                    help="when a node is lost: seconds to wait for capacity to "
                                         "return (the lost actors then restart and the step is "
                                         "redone); past it the last good step is checkpointed "
                                         "and the run stops with the --resume command")

    @property
    def any_trigger(self) -> bool:
        """Whether any save trigger is on (a run may checkpoint at all)."""
        return bool(self.every_steps or self.every_minutes or self.at_steps)

    def __post_init__(self) -> None:
        for i, s in enumerate(self.at_steps):
            if not 0 <= s <= MAX_STEPS:
                raise InputError(f"got {s}; allowed: step indices >= 0 and <= {MAX_STEPS}",
                                 field=f"at_steps[{i}]")
