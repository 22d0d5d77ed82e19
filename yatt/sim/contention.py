"""Host contention: devices that share one host slow each other down.

Why: a cost model answers "how long does this op take on one device"; its tables come from
one process measuring alone. On a CPU box the executor's "devices" are single threads of
one host, so when two engines re-create, two DP ranks train or two engines decode at the
same time they share cores, caches, the memory bus and the Ray/OS daemons, and each runs
slower than it did alone (measured: re-create 1.3-1.5x, decode ~1.5x with 2 busy on the
2-core CI box). The simulator knows how many devices are busy at once in each phase; a cost
model that implements `HostContention` says how much slower that makes the phase. A cost
model without it (the analytic GPU model) is contention-free. The slow-down is applied
from the phase's static device count, not from instantaneous overlap: an engine that idles
waiting for work is still counted (simple, and errs towards slower).
"""
from __future__ import annotations

from typing import Any, Optional, Protocol, runtime_checkable

from yatt.core import Phase


@runtime_checkable
class HostContention(Protocol):
    """Optional cost-model extension: the factor (>= 0, 1.0 = none) by which `phase` slows
    down when `busy` devices of the host run it at once."""

    def contention(self, phase: Phase, busy: int) -> float: ...


@runtime_checkable
class EngineContention(Protocol):
    """Optional cost-model extension: one engine model's own slow-down factor with `busy`
    devices of the host generating at once, or None where the model has no measurement
    (then the phase's `HostContention` factor applies). A larger model than the one the
    shared factor was measured with contends for caches and the memory bus more."""

    def engine_contention(self, model: Any, busy: int) -> Optional[float]: ...


def slowdown(cost: Any, phase: Phase, busy: int) -> float:
    """`cost.contention(phase, busy)` when the cost model models contention, else 1.0."""
    if busy <= 1 or not isinstance(cost, HostContention):
        return 1.0
    return float(cost.contention(phase, busy))


class SlowedEngineCost:
    """A cost model whose engine-step terms (prefill, decode) are `factor` times slower;
    everything else is the wrapped model's. Handed to `GenEngine`s of a contended phase."""

    def __init__(self, cost: Any, factor: float) -> None:
        self._cost, self.factor = cost, factor

    def prefill_time(self, model, tp: int, tokens: int) -> float:
        return self.factor * self._cost.prefill_time(model, tp, tokens)

    def decode_step_time(self, model, tp: int, batch: int, mean_ctx: float) -> float:
        return self.factor * self._cost.decode_step_time(model, tp, batch, mean_ctx)

    def decode_time(self, model, tp: int, batch: int, ctx_sum: float, steps: int) -> float:
        return self.factor * self._cost.decode_time(model, tp, batch, ctx_sum, steps)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cost, name)


def engine_cost(cost: Any, phase: Phase, busy: int, model: Any = None) -> Any:
    """The cost model engines of `model` in `phase` should use with `busy` devices
    generating at once: the model's own factor where the cost model has one
    (`EngineContention`), else the phase's."""
    own = (cost.engine_contention(model, busy)
           if busy > 1 and model is not None and isinstance(cost, EngineContention) else None)
    f = float(own) if own is not None else slowdown(cost, phase, busy)
    return cost if f == 1.0 else SlowedEngineCost(cost, f)
