"""What a placement costs: GPU-hours per step and per run, dollars, samples/s per GPU.

Why: a faster placement on more GPUs is not always the cheaper one. Step times become
budgets here, in one place, so the ranking, the scaling table, the what-if table, the JSON
summary and the Python API all price runs the same way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from yatt.core.errors import InputError


@dataclass(frozen=True)
class Pricing:
    """How to price a run: `steps` RL steps, `price` dollars per GPU-hour (None: no dollars)."""

    steps: int = 1
    price: Optional[float] = None

    def __post_init__(self) -> None:
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise InputError(f"got {self.steps!r}; allowed: an integer >= 1", field="--steps")
        if self.price is not None and (isinstance(self.price, bool)
                                       or not isinstance(self.price, (int, float))
                                       or not math.isfinite(self.price) or self.price <= 0):
            raise InputError(f"got {self.price!r}; allowed: a finite number > 0 (dollars per "
                             "GPU-hour)", field="--price-per-gpu-hour")


@dataclass(frozen=True)
class CostView:
    """One placement's cost figures."""

    gpus: int
    step_s: float
    samples_per_s: float
    pricing: Pricing

    @property
    def gpu_hours_per_step(self) -> float:
        return self.gpus * self.step_s / 3600.0

    @property
    def gpu_hours_run(self) -> float:
        return self.gpu_hours_per_step * self.pricing.steps

    @property
    def hours_run(self) -> float:
        """Wall-clock hours for the run."""
        return self.step_s * self.pricing.steps / 3600.0

    @property
    def dollars_per_step(self) -> Optional[float]:
        p = self.pricing.price
        return None if p is None else p * self.gpu_hours_per_step

    @property
    def dollars_run(self) -> Optional[float]:
        p = self.pricing.price
        return None if p is None else p * self.gpu_hours_run

    @property
    def samples_per_s_per_gpu(self) -> float:
        return self.samples_per_s / self.gpus if self.gpus else 0.0


def cost_view(gpus: int, step_s: float, samples_per_s: float,
              pricing: Optional[Pricing] = None) -> CostView:
    return CostView(gpus, step_s, samples_per_s, pricing or Pricing())


def dollars(x: Optional[float]) -> str:
    """A dollar amount for a table ('' when there is no price)."""
    if x is None:
        return ""
    return f"${x:,.2f}" if x < 1000 else f"${x:,.0f}"


def hours(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:,.1f}"
