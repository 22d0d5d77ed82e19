"""Full-size refinement of a sliced search, with the fluid step model.

Why: above a few hundred devices the search runs on a load-preserving 1/k slice, whose
GPU splits are k times coarser than the cluster's (a 64-device slice of 8,192 devices
sees splits 1,024 devices apart), and whose longest responses are shorter (fewer samples
per step, a thinner tail). This module takes the slice's shortlist back to full size and
places each partial-colocate split at full resolution: a golden-section search on the
fluid model's step time (`yatt.sim.fluid`) over the cluster's legal splits, bracketed by
the slice's neighbouring splits and widened while the best point sits on the bracket's
edge. The fluid model is ranked against the SimPy simulation in tests; the planner
confirms what it chooses with the simulation where that fits its budget.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from yatt.core.plan import Experiment
from yatt.core.roles import Mode

from .space import partial_splits

GOLD = (math.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class SplitRefinement:
    """How one (rollout TP, GenRM TP, trainer layout)'s split was placed at full size."""

    rollout_tp: int
    genrm_tp: int
    splits: int          # legal splits at full size
    evaluated: int       # fluid evaluations
    start: int           # the slice's choice, scaled to full size
    best: int            # rollout devices chosen


def golden_min(f: Callable[[int], float], lo: int, hi: int, n: int) -> int:
    """An index in [0, n) minimising f, searched from the bracket [lo, hi]: golden section
    down to adjacent points, then outwards while an edge of the bracket is the best (the
    bracket widens by its own width each time). f is memoised by the caller."""
    lo, hi = max(0, lo), min(n - 1, hi)
    while True:
        a, b = lo, hi
        while b - a > 2:
            c = b - int(round(GOLD * (b - a)))
            d = a + int(round(GOLD * (b - a)))
            c, d = min(max(c, a + 1), b - 1), max(min(d, b - 1), a + 1)
            if c >= d:
                c, d = (a + b) // 2, (a + b) // 2 + 1
            if f(c) <= f(d):
                b = d
            else:
                a = c
        best = min(range(a, b + 1), key=lambda i: (f(i), i))
        width = max(2, hi - lo)
        if best == lo and lo > 0 and f(lo - 1) < f(best):
            lo, hi = max(0, lo - width), lo
        elif best == hi and hi < n - 1 and f(hi + 1) < f(best):
            lo, hi = hi, min(n - 1, hi + width)
        else:
            return best


def refine_split(exp: Experiment, step_time: Callable[[int], float], rollout_tp: int,
                 genrm_tp: int, start: int, radius: int) -> SplitRefinement:
    """Place the split of one TP pair at full resolution. `step_time(r)`: the fluid model's
    step time with r rollout devices; `start`: the slice's best split scaled up; `radius`:
    devices between the slice's neighbouring splits, scaled up (the first bracket)."""
    splits = partial_splits(exp, rollout_tp, genrm_tp)
    if not splits:
        raise ValueError(f"no legal split for rollout tp{rollout_tp} / GenRM tp{genrm_tp}")
    seen: dict[int, float] = {}

    def f(i: int) -> float:
        if i not in seen:
            seen[i] = step_time(splits[i])
        return seen[i]

    i0 = min(range(len(splits)), key=lambda i: abs(splits[i] - start))
    step = splits[1] - splits[0] if len(splits) > 1 else 1
    k = max(1, round(radius / step))
    best = golden_min(f, i0 - k, i0 + k, len(splits))
    return SplitRefinement(rollout_tp, genrm_tp, len(splits), len(seen), start, splits[best])


def is_partial(key: tuple) -> bool:
    return key[0] is Mode.PARTIAL
