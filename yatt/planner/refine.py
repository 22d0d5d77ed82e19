"""Full-size refinement of a sliced search, with the fluid step model.

Why: above a few hundred devices the search runs on a load-preserving 1/k slice, whose
GPU splits are k times coarser than the cluster's (a 64-device slice of 8,192 devices
sees splits 1,024 devices apart), and whose longest responses are shorter (fewer samples
per step, a thinner tail). This module takes the slice's shortlist back to full size and
places each partial-colocate split at full resolution: a golden-section search on the
fluid model's step time (`yatt.sim.fluid`) over the cluster's legal splits, bracketed by
the slice's neighbouring splits and widened while the best point sits on the bracket's
edge, down to 1/128 of the legal splits (the step time is flat near its optimum). The fluid model is ranked against the SimPy simulation in tests; the planner
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
RESOLUTION = 128   # the search stops at 1/RESOLUTION of the legal splits (or adjacent ones)


@dataclass(frozen=True)
class SplitRefinement:
    """How one (rollout TP, GenRM TP, trainer layout)'s split was placed at full size."""

    rollout_tp: int
    genrm_tp: int
    splits: int          # legal splits at full size
    evaluated: int       # fluid evaluations
    start: int           # the slice's choice, scaled to full size
    best: int            # rollout devices chosen


def golden_min(f: Callable[[int], float], lo: int, hi: int, n: int, tol: int = 2) -> int:
    """An index in [0, n) minimising f, searched from the bracket [lo, hi]: golden section
    until the bracket is at most `tol` indices wide (then the best point evaluated in it),
    then outwards while an edge of the bracket is the best (the bracket widens by its own
    width each time)."""
    seen: dict[int, float] = {}

    def g(i: int) -> float:
        if i not in seen:
            seen[i] = f(i)
        return seen[i]

    lo, hi = max(0, lo), min(n - 1, hi)
    tol = max(2, tol)
    while True:
        a, b = lo, hi
        while b - a > tol:
            c = b - int(round(GOLD * (b - a)))
            d = a + int(round(GOLD * (b - a)))
            c, d = min(max(c, a + 1), b - 1), max(min(d, b - 1), a + 1)
            if c >= d:
                c, d = (a + b) // 2, (a + b) // 2 + 1
            if g(c) <= g(d):
                b = d
            else:
                a = c
        inside = [i for i in seen if a <= i <= b] or [a, b]
        if b - a <= 2:
            inside = list(range(a, b + 1))
        best = min(inside, key=lambda i: (g(i), i))
        width = max(2, hi - lo)
        if best <= lo + tol // 2 and lo > 0 and g(lo - 1) < g(best):
            lo, hi = max(0, lo - width), lo
        elif best >= hi - tol // 2 and hi < n - 1 and g(hi + 1) < g(best):
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
    k = max(1, round(radius / step))       # out to the slice's neighbouring splits
    best = golden_min(f, i0 - k, i0 + k, len(splits), tol=len(splits) // RESOLUTION)
    return SplitRefinement(rollout_tp, genrm_tp, len(splits), len(seen), start, splits[best])


def is_partial(key: tuple) -> bool:
    return key[0] is Mode.PARTIAL
