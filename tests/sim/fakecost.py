"""FAKE cost model for simulator tests. Not calibrated against anything.

Why: the simulator takes its costs as a parameter; tests need a model whose numbers are
simple enough to reason about (linear in tokens, scaled by parameter count) so a test can
build "heavy GenRM" or "free switches" cases from specs. Never use it for predictions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from yatt.core import CostModel, ModelSpec, Parallel, ReleasePolicy, Role


@dataclass(frozen=True)
class FakeCostModel(CostModel):
    """FAKE: every time is linear in tokens and in billions of parameters (`b`). The
    optional terms keep the contract's neutral defaults."""

    train_s_per_btok: float = 6e-5       # per token per billion params, per device
    logprob_s_per_btok: float = 2e-5
    prefill_s_per_btok: float = 2e-6
    decode_step_s_per_b: float = 2e-3    # fixed cost of a decode step (weights read)
    decode_s_per_seq_b: float = 2e-5     # per running sequence
    decode_s_per_ctx_b: float = 1e-9     # per context token (KV read)
    kv_tokens: int = 400_000             # KV capacity per engine per device
    switch_s_per_b: float = 0.05         # offload or reload, per billion params
    sync_s_per_b: float = 0.02
    grad_sync_s_per_b: float = 0.01
    genrm_scale: float = 1.0             # multiplies every GenRM-engine cost
    switch_scale: float = 1.0            # multiplies offload/reload/weight-sync costs

    @staticmethod
    def _b(model: ModelSpec) -> float:
        return model.params / 1e9

    def _scale(self, model: ModelSpec) -> float:
        # GenRM-ness is recognised by size here: tests give the GenRM a different model.
        return self.genrm_scale if model.name.lower().startswith("genrm") else 1.0

    def train_time(self, model: ModelSpec, seq_lens: Sequence[int], par: Parallel) -> float:
        return self.train_s_per_btok * self._b(model) * float(sum(seq_lens)) / (par.tp * par.pp)

    def grad_sync_time(self, model: ModelSpec, par: Parallel) -> float:
        return self.grad_sync_s_per_b * self._b(model) if par.dp > 1 else 0.0

    def logprob_time(self, model: ModelSpec, seq_lens: Sequence[int], par: Parallel) -> float:
        return self.logprob_s_per_btok * self._b(model) * float(sum(seq_lens)) / (par.tp * par.pp)

    def prefill_time(self, model: ModelSpec, tp: int, tokens: int) -> float:
        return self._scale(model) * self.prefill_s_per_btok * self._b(model) * tokens / tp

    def decode_step_time(self, model: ModelSpec, tp: int, batch: int, mean_ctx: float) -> float:
        b = self._b(model) / tp
        return self._scale(model) * b * (self.decode_step_s_per_b + self.decode_s_per_seq_b * batch
                                         + self.decode_s_per_ctx_b * batch * mean_ctx)

    def decode_time(self, model: ModelSpec, tp: int, batch: int, ctx_sum: float, steps: int) -> float:
        b = self._scale(model) * self._b(model) / tp
        per = self.decode_step_s_per_b + self.decode_s_per_seq_b * batch
        ctx_total = steps * ctx_sum + batch * steps * (steps - 1) / 2.0
        return b * (per * steps + self.decode_s_per_ctx_b * ctx_total)

    def kv_capacity_tokens(self, model: ModelSpec, tp: int, mem_util: float) -> int:
        return int(self.kv_tokens * tp * mem_util)

    def offload_time(self, model: ModelSpec, role: Role, par: Parallel, release: ReleasePolicy) -> float:
        if release is ReleasePolicy.RESIDENT:
            return 0.0
        s = self.genrm_scale if role is Role.GENRM else 1.0
        return self.switch_scale * s * self.switch_s_per_b * self._b(model) / par.tp

    def reload_time(self, model: ModelSpec, role: Role, par: Parallel, release: ReleasePolicy) -> float:
        return self.offload_time(model, role, par, release)

    def weight_sync_time(self, model: ModelSpec, trainer: Parallel, rollout_tp: int,
                         rollout_engines: int, cross_node: bool) -> float:
        return self.switch_scale * self.sync_s_per_b * self._b(model) * (2.0 if cross_node else 1.0)

    def checkpoint_time(self, model: ModelSpec, par: Parallel) -> float:
        return 0.1 * self._b(model)

    def controller_time(self, samples: int, bytes_per_sample: float, controllers: int) -> float:
        return samples * bytes_per_sample / 1e9 / controllers
