"""Host contention: devices that share one host slow each other down.

Why: a cost model answers "how long does this op take on one device"; its tables come from
one process measuring alone. On a CPU box the executor's "devices" are single threads of
one host, so when two engines re-create, two DP ranks train or two engines decode at the
same time they share cores, caches, the memory bus and the Ray/OS daemons, and each runs
slower than it would alone. The simulator knows how many devices are busy at once in each
phase; the cost model's `contention` (and, per engine model, `engine_contention`) says how
much slower that makes the phase (1.0 by default: a contention-free model, such as the
analytic GPU one). The slow-down is applied from the phase's static device count, not from
instantaneous overlap: an engine that idles waiting for work is still counted (simple,
and errs towards slower).
"""
from __future__ import annotations

from typing import Optional

from yatt.core import CostModel, ModelSpec, Phase
from yatt.core.costmodel import DelegatingCostModel


def slowdown(cost: CostModel, phase: Phase, busy: int) -> float:
    """The factor by which `phase` slows down with `busy` devices of the host running it:
    `cost.contention`, asked only when more than one device is busy."""
    if busy <= 1:
        return 1.0
    return float(cost.contention(phase, busy))


class SlowedEngineCost(DelegatingCostModel):
    """A cost model whose engine-step terms (prefill, decode) are `factor` times slower;
    every other term is the wrapped model's. Handed to `GenEngine`s of a contended phase."""

    def __init__(self, cost: CostModel, factor: float) -> None:
        super().__init__(cost)
        self.factor = factor

    def prefill_time(self, model, tp: int, tokens: int) -> float:
        return self.factor * self.inner.prefill_time(model, tp, tokens)

    def decode_step_time(self, model, tp: int, batch: int, mean_ctx: float) -> float:
        return self.factor * self.inner.decode_step_time(model, tp, batch, mean_ctx)

    def decode_time(self, model, tp: int, batch: int, ctx_sum: float, steps: int) -> float:
        return self.factor * self.inner.decode_time(model, tp, batch, ctx_sum, steps)


def engine_cost(cost: CostModel, phase: Phase, busy: int,
                model: Optional[ModelSpec] = None) -> CostModel:
    """The cost model engines of `model` in `phase` should use with `busy` devices
    generating at once: the model's own factor where the cost model has one
    (`engine_contention`), else the phase's (`contention`)."""
    own = cost.engine_contention(model, busy) if busy > 1 and model is not None else None
    f = float(own) if own is not None else slowdown(cost, phase, busy)
    return cost if f == 1.0 else SlowedEngineCost(cost, f)
