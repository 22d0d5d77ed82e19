"""The CostModel contract: every time the simulator may ask for, as a function of specs.

Why: the simulator takes its costs as a parameter (analytic, profiled, calibrated, or a
labelled fake in tests) and never imports a concrete model. A cost model subclasses
`CostModel` and implements the abstract terms; the optional terms have neutral defaults
(no hand-off cost, joins priced like prefill, free engine calls, no host contention), so
the simulator calls every term directly and a model overrides only what it measures.
All times are seconds on one model replica (one TP*PP group) unless stated otherwise.

`DelegatingCostModel` forwards every term to another cost model, for wrappers that change
a few terms (the simulator's contended engines, calibration probes).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Optional, Sequence

from .plan import Parallel
from .roles import Phase, ReleasePolicy, Role
from .specs import ModelSpec


class CostModel(ABC):
    # ---- training (one DP rank) --------------------------------------------------------
    @abstractmethod
    def train_time(self, model: ModelSpec, seq_lens: Sequence[int], par: Parallel) -> float:
        """Forward+backward of these sequences on one DP rank (TP/PP comm included)."""

    @abstractmethod
    def grad_sync_time(self, model: ModelSpec, par: Parallel) -> float:
        """DP gradient all-reduce (or reduce-scatter+all-gather) plus the optimizer step."""

    @abstractmethod
    def logprob_time(self, model: ModelSpec, seq_lens: Sequence[int], par: Parallel) -> float:
        """Forward-only log-prob pass (reference policy) on one DP rank."""

    # ---- inference engine (one TP group) -----------------------------------------------
    @abstractmethod
    def prefill_time(self, model: ModelSpec, tp: int, tokens: int) -> float:
        """Prefill of `tokens` prompt tokens on an idle engine (compute-bound)."""

    @abstractmethod
    def decode_time(self, model: ModelSpec, tp: int, batch: int, ctx_sum: float, steps: int) -> float:
        """`steps` decode steps of a fixed running batch whose total context is `ctx_sum`
        tokens at the first step and grows by `batch` per step. Must equal the sum of
        `decode_step_time` over those steps (closed form where possible)."""

    @abstractmethod
    def decode_step_time(self, model: ModelSpec, tp: int, batch: int, mean_ctx: float) -> float:
        """One decode step of `batch` sequences at mean context `mean_ctx`."""

    @abstractmethod
    def kv_capacity_tokens(self, model: ModelSpec, tp: int, mem_util: float) -> int:
        """Tokens of KV cache one engine can hold (0 if the weights do not fit)."""

    def prefill_join_time(self, model: ModelSpec, tp: int, tokens: int) -> float:
        """A request's prefill when it joins a batch that is already decoding (it rides in
        a mixed prefill+decode step). Streamed requests (a GenRM in partial colocate)
        nearly always join; a batch entering an idle engine does not. Default: the same
        as `prefill_time`."""
        return self.prefill_time(model, tp, tokens)

    def engine_call_time(self, model: ModelSpec, requests: int) -> float:
        """Seconds of an engine's process that one call handing it `requests` requests
        costs beyond the engine steps (the call's round trip, turning results into
        requests, adding them to the engine, returning the results). Charged per engine
        per batch call and per streamed hand-off it receives. Default: free."""
        return 0.0

    def stream_handoff_time(self, items: int) -> float:
        """Seconds a rollout engine loses handing one batch of `items` finished requests
        to the GenRM queue when streaming (partial colocate): serialising and sending it
        runs on the engine's own core. Default: free."""
        return 0.0

    # ---- phase switches ----------------------------------------------------------------
    @abstractmethod
    def offload_time(self, model: ModelSpec, role: Role, par: Parallel, release: ReleasePolicy) -> float:
        """Release a role's device memory at the end of its phase (what the role does under
        `release`: `yatt.core.release.resolve_release`)."""

    @abstractmethod
    def reload_time(self, model: ModelSpec, role: Role, par: Parallel, release: ReleasePolicy) -> float:
        """Bring a role back onto its devices before its phase."""

    @abstractmethod
    def weight_sync_time(self, model: ModelSpec, trainer: Parallel, rollout_tp: int,
                         rollout_engines: int, cross_node: bool) -> float:
        """Push updated trainer weights into every rollout engine."""

    @abstractmethod
    def checkpoint_time(self, model: ModelSpec, par: Parallel) -> float:
        """Write a full training checkpoint (weights + optimizer)."""

    @abstractmethod
    def controller_time(self, samples: int, bytes_per_sample: float, controllers: int) -> float:
        """Move a step's per-sample data through `controllers` controller processes."""

    # ---- host contention ---------------------------------------------------------------
    def contention(self, phase: Phase, busy: int) -> float:
        """The factor (>= 0, 1.0 = none) by which `phase` slows down when `busy` devices of
        one host run it at once. Devices that share a host (CPU "devices" are threads of
        one machine) share cores, caches and the memory bus; the simulator says how many
        are busy, the cost model how much slower that makes the phase. Default: none."""
        return 1.0

    def engine_contention(self, model: ModelSpec, busy: int) -> Optional[float]:
        """One engine model's own slow-down factor with `busy` devices of the host
        generating at once, or None where the model has none (then the phase's
        `contention` factor applies). Default: None."""
        return None


class DelegatingCostModel(CostModel):
    """Every term answered by `inner`; subclasses override the terms they change."""

    def __init__(self, inner: CostModel) -> None:
        self.inner = inner

    def train_time(self, model, seq_lens, par):
        return self.inner.train_time(model, seq_lens, par)

    def grad_sync_time(self, model, par):
        return self.inner.grad_sync_time(model, par)

    def logprob_time(self, model, seq_lens, par):
        return self.inner.logprob_time(model, seq_lens, par)

    def prefill_time(self, model, tp, tokens):
        return self.inner.prefill_time(model, tp, tokens)

    def decode_time(self, model, tp, batch, ctx_sum, steps):
        return self.inner.decode_time(model, tp, batch, ctx_sum, steps)

    def decode_step_time(self, model, tp, batch, mean_ctx):
        return self.inner.decode_step_time(model, tp, batch, mean_ctx)

    def kv_capacity_tokens(self, model, tp, mem_util):
        return self.inner.kv_capacity_tokens(model, tp, mem_util)

    def prefill_join_time(self, model, tp, tokens):
        return self.inner.prefill_join_time(model, tp, tokens)

    def engine_call_time(self, model, requests):
        return self.inner.engine_call_time(model, requests)

    def stream_handoff_time(self, items):
        return self.inner.stream_handoff_time(items)

    def offload_time(self, model, role, par, release):
        return self.inner.offload_time(model, role, par, release)

    def reload_time(self, model, role, par, release):
        return self.inner.reload_time(model, role, par, release)

    def weight_sync_time(self, model, trainer, rollout_tp, rollout_engines, cross_node):
        return self.inner.weight_sync_time(model, trainer, rollout_tp, rollout_engines, cross_node)

    def checkpoint_time(self, model, par):
        return self.inner.checkpoint_time(model, par)

    def controller_time(self, samples, bytes_per_sample, controllers):
        return self.inner.controller_time(samples, bytes_per_sample, controllers)

    def contention(self, phase, busy):
        return self.inner.contention(phase, busy)

    def engine_contention(self, model, busy):
        return self.inner.engine_contention(model, busy)
