"""Enums for roles, phases, modes and policies.

Why: roles and phases appear in plans, traces, the simulator and the executor. Keeping
them as enums (not strings scattered through the code) makes a typo a load-time error.
"""
from __future__ import annotations

from enum import Enum


class Role(str, Enum):
    ROLLOUT = "rollout"      # actor inference engine (vLLM)
    GENRM = "genrm"          # generative reward model engine (vLLM)
    TRAINER = "trainer"      # actor training (Megatron-Core)
    REFERENCE = "reference"  # frozen initial policy for KL log-probs


class Phase(str, Enum):
    ROLLOUT = "rollout"
    GENRM = "genrm"
    TRAIN = "train"
    REF_LOGPROB = "ref_logprob"
    OLD_LOGPROB = "old_logprob"  # the actor's own forward before training (old_logprobs: recompute)
    OFFLOAD = "offload"
    RELOAD = "reload"
    WEIGHT_SYNC = "weight_sync"
    CHECKPOINT = "checkpoint"
    CONTROLLER = "controller"


class Mode(str, Enum):
    COLOCATE = "colocate"  # rollout -> genrm -> train in sequence, each on all devices
    PARTIAL = "partial"    # rollout and genrm on disjoint devices, streaming; train on all
    ASYNC = "async"        # generators and trainer on disjoint devices, steps overlapped
                           # (off-policy by at most Plan.max_staleness weight versions)


class BalancePolicy(str, Enum):
    NAIVE = "naive"        # contiguous equal-count chunks
    GREEDY = "greedy"      # longest-processing-time first onto the least-loaded rank
    KK = "kk"              # Karmarkar-Karp largest differencing


class BalanceCost(str, Enum):
    TOKENS = "tokens"      # cost of a sequence = its token count
    FLOPS = "flops"        # tokens plus the seq^2 attention term


class ReleasePolicy(str, Enum):
    """What a role does with its device memory when its phase ends (full colocate).

    OFFLOAD: move weights (and optimizer state) to host memory, reload later (GPU sleep mode).
    TEARDOWN: destroy the engine and re-create it (the honest CPU equivalent; vLLM-CPU has
      no sleep mode).
    RESIDENT: keep everything resident (only when memory allows all roles at once).
    """

    OFFLOAD = "offload"
    TEARDOWN = "teardown"
    RESIDENT = "resident"


class DistKind(str, Enum):
    CONST = "const"
    UNIFORM = "uniform"
    LOGNORMAL = "lognormal"
    EMPIRICAL = "empirical"


class RewardSource(str, Enum):
    GENRM = "genrm"          # the GenRM's verdict
    RULE = "rule"            # the rule reward (`reward:` section)
    WEIGHTED = "weighted"    # reward.rule_weight * rule + reward.genrm_weight * GenRM

    @property
    def needs_genrm(self) -> bool:
        """Whether this source asks a GenRM engine (and so needs a genrm model)."""
        return self is not RewardSource.RULE


class AlgoName(str, Enum):
    GRPO = "grpo"
    PPO = "ppo"


class TraceSource(str, Enum):
    SIMULATED = "simulated"
    MEASURED = "measured"
