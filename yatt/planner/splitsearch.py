"""Pure 1-D and coordinate search algorithms used by the placement search.

Why: kept apart from the simulator-driven orchestration so they can be tested on
synthetic functions (unimodal or not) and reused: `search_split` is the guarded ternary
search over a partial-colocate split, `local_split` a warm-started hill-climb, and
`coordinate_descent` the per-role TP search.
"""
from __future__ import annotations

import itertools
from typing import Callable, Optional


def _unimodal(values: list[float]) -> bool:
    """Non-increasing then non-decreasing (ties allowed)."""
    i = 0
    while i + 1 < len(values) and values[i + 1] <= values[i]:
        i += 1
    while i + 1 < len(values) and values[i + 1] >= values[i]:
        i += 1
    return i == len(values) - 1


def search_split(f: Callable[[int], float], splits: list[int], *, grid: int = 5,
                 scan_budget: int = 12, exhaustive: bool = False) -> tuple[int, bool, str, int]:
    """Minimise f over the sorted list `splits`. Returns (best, unimodal, method, calls).

    Pure: only calls f. Guarded ternary search (see module docstring)."""
    seen: dict[int, float] = {}

    def ev(i: int) -> float:
        if i not in seen:
            seen[i] = f(splits[i])
        return seen[i]

    n = len(splits)
    if exhaustive or n <= grid + 2:
        vals = [ev(i) for i in range(n)]
        best = min(range(n), key=lambda i: (vals[i], i))
        return splits[best], _unimodal(vals), "exhaustive", len(seen)
    idx = sorted({round(k * (n - 1) / (grid - 1)) for k in range(grid)})
    vals = [ev(i) for i in idx]
    unimodal = _unimodal(vals)
    if unimodal:
        b = min(range(len(idx)), key=lambda k: (vals[k], k))
        lo = idx[max(0, b - 1)]
        hi = idx[min(len(idx) - 1, b + 1)]
        method = "ternary"
        while hi - lo > 2:
            m1 = lo + (hi - lo) // 3
            m2 = hi - (hi - lo) // 3
            if ev(m1) <= ev(m2):
                hi = m2
            else:
                lo = m1
        for i in range(lo, hi + 1):
            ev(i)
    else:
        method = "scan"
        step = max(1, (n - 1) // max(1, scan_budget - 1))
        for i in range(0, n, step):
            ev(i)
    # hill-climb: a better neighbour means the bracket missed; walk to a local minimum
    best = min(seen, key=lambda i: (seen[i], i))
    while True:
        nbrs = [j for j in (best - 1, best + 1) if 0 <= j < n]
        nxt = min(nbrs, key=lambda j: (ev(j), j))
        if ev(nxt) < ev(best):
            best = nxt
        else:
            break
    return splits[best], unimodal, method, len(seen)


def coordinate_descent(f: Callable[[tuple[int, ...]], float], options: list[list[int]],
                        exhaustive: bool, start: Optional[tuple[int, ...]] = None) -> tuple[int, ...]:
    """Minimise f over the product of per-coordinate options, one coordinate at a time."""
    if exhaustive:
        return min(itertools.product(*options), key=f)
    x = list(start) if start else [opts[0] for opts in options]
    for _ in range(2):  # two sweeps: enough for (near-)separable objectives
        changed = False
        for i, opts in enumerate(options):
            best = min(opts, key=lambda v: f(tuple(x[:i] + [v] + x[i + 1:])))
            if best != x[i]:
                x[i], changed = best, True
        if not changed:
            break
    return tuple(x)


def local_split(f: Callable[[int], float], splits: list[int], frac: float) -> tuple[int, bool, str, int]:
    """Hill-climb from the split nearest `frac` of the cluster (a warm start from another
    TP pair's optimum). Returns (best, unimodal-unknown=True, "local", calls); `best` is
    always among the `calls` splits simulated."""
    seen: dict[int, float] = {}

    def ev(i: int) -> float:
        if i not in seen:
            seen[i] = f(splits[i])
        return seen[i]

    total = splits[-1] + splits[0]  # ~ cluster size
    i = min(range(len(splits)), key=lambda j: abs(splits[j] - frac * total))
    ev(i)  # the start is simulated too (with one split it is the only one, and the best)
    while True:
        nbrs = [j for j in (i - 1, i + 1) if 0 <= j < len(splits)]
        j = min(nbrs, key=lambda j: (ev(j), j)) if nbrs else i
        if nbrs and ev(j) < ev(i):
            i = j
        else:
            break
    return splits[i], True, "local", len(seen)
