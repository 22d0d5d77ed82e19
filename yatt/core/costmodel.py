"""The CostModel protocol: every time the simulator needs, as a function of specs.

Why: the simulator takes its costs as a parameter (analytic, profiled, calibrated, or a
labelled fake in tests) and never imports a concrete model. All times are seconds on one
model replica (one TP*PP group) unless stated otherwise.
"""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from .plan import Parallel
from .roles import ReleasePolicy, Role
from .specs import ModelSpec


@runtime_checkable
class CostModel(Protocol):
    # ---- training (one DP rank) --------------------------------------------------------
    def train_time(self, model: ModelSpec, seq_lens: Sequence[int], par: Parallel) -> float:
        """Forward+backward of these sequences on one DP rank (TP/PP comm included)."""

    def grad_sync_time(self, model: ModelSpec, par: Parallel) -> float:
        """DP gradient all-reduce (or reduce-scatter+all-gather) plus the optimizer step."""

    def logprob_time(self, model: ModelSpec, seq_lens: Sequence[int], par: Parallel) -> float:
        """Forward-only log-prob pass (reference policy) on one DP rank."""

    # ---- inference engine (one TP group) -----------------------------------------------
    def prefill_time(self, model: ModelSpec, tp: int, tokens: int) -> float:
        """Prefill of `tokens` prompt tokens (compute-bound)."""

    def decode_time(self, model: ModelSpec, tp: int, batch: int, ctx_sum: float, steps: int) -> float:
        """`steps` decode steps of a fixed running batch whose total context is `ctx_sum`
        tokens at the first step and grows by `batch` per step. Must equal the sum of
        `decode_step_time` over those steps (closed form where possible)."""

    def decode_step_time(self, model: ModelSpec, tp: int, batch: int, mean_ctx: float) -> float:
        """One decode step of `batch` sequences at mean context `mean_ctx`."""

    def kv_capacity_tokens(self, model: ModelSpec, tp: int, mem_util: float) -> int:
        """Tokens of KV cache one engine can hold (0 if the weights do not fit)."""

    # ---- phase switches ----------------------------------------------------------------
    def offload_time(self, model: ModelSpec, role: Role, par: Parallel, release: ReleasePolicy) -> float:
        """Release a role's device memory at the end of its phase."""

    def reload_time(self, model: ModelSpec, role: Role, par: Parallel, release: ReleasePolicy) -> float:
        """Bring a role back onto its devices before its phase."""

    def weight_sync_time(self, model: ModelSpec, trainer: Parallel, rollout_tp: int,
                         rollout_engines: int, cross_node: bool) -> float:
        """Push updated trainer weights into every rollout engine."""

    def checkpoint_time(self, model: ModelSpec, par: Parallel) -> float:
        """Write a full training checkpoint (weights + optimizer)."""

    def controller_time(self, samples: int, bytes_per_sample: float, controllers: int) -> float:
        """Move a step's per-sample data through `controllers` controller processes."""
