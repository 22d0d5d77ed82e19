"""Placement search: pick mode, GPU split and TP per role by simulating candidates.

Why: the step time of a placement has no closed form (long tails, streaming, KV limits),
so the simulator is the oracle, and each call costs ~0.1-1 s. The search spends few calls:

- Full colocate: the phases run one after another, so step time is (nearly) separable in
  the TP of each role. Coordinate descent over each role's feasible TPs finds the optimum
  in 1 + sum(options - 1) simulations.
- Partial colocate: for each (rollout TP, GenRM TP) pair, step time over the split
  r = rollout devices is usually unimodal (too few rollout devices: rollout-bound; too
  few GenRM devices: judge-bound). A coarse grid checks that; if the grid is unimodal,
  an integer ternary search refines inside the bracket (as WeChat-YATT describes). If it
  is not, we fall back to a bounded scan and say so. A final hill-climb checks neighbours.
- The best few candidates are re-simulated over `search.seeds` seeds: mean +/- spread.

`exhaustive=True` simulates everything (for tests and the regret benchmark).
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from yatt.core.errors import InputError
from yatt.core.plan import Experiment, Plan
from yatt.core.roles import Mode
from yatt.core.costmodel import CostModel
from yatt.core.trace import SampleRecord, Trace
from yatt.sim.metrics import StepStats, summarize
from yatt.sim.plans import make_plan
from yatt.sim.simulate import simulate

from .space import Space, partial_splits, placement_space

Key = tuple[Mode, int, int, int, int]  # mode, rollout devices (0 = all), rollout tp, genrm tp, trainer tp
Progress = Callable[[int, str], None]


@dataclass(frozen=True)
class Candidate:
    key: Key
    plan: Plan
    step_times: tuple[float, ...]   # one per seed
    stats: StepStats                # of the seed-0 simulation
    trace: Trace                    # the seed-0 simulation

    @property
    def mean(self) -> float:
        return sum(self.step_times) / len(self.step_times)

    @property
    def spread(self) -> float:
        m = self.mean
        return math.sqrt(sum((t - m) ** 2 for t in self.step_times) / len(self.step_times))


@dataclass(frozen=True)
class SplitReport:
    rollout_tp: int
    genrm_tp: int
    splits: int          # legal splits for this TP pair
    evaluated: int       # splits simulated
    unimodal: bool       # the coarse grid looked unimodal
    method: str          # "exhaustive" | "ternary" | "scan"
    best_rollout_devices: int


@dataclass(frozen=True)
class SearchResult:
    ranked: tuple[Candidate, ...]
    space: Space
    simulations: int
    space_size: int
    split_reports: tuple[SplitReport, ...]
    seconds: float

    @property
    def best(self) -> Candidate:
        return self.ranked[0]

    def best_of(self, mode: Mode) -> Optional[Candidate]:
        for c in self.ranked:
            if c.plan.mode is mode:
                return c
        return None


@dataclass
class _Evaluator:
    """Memoised seed-0 simulations of placements."""

    exp: Experiment
    cost: CostModel
    progress: Optional[Progress] = None
    recorded: Optional[Sequence[SampleRecord]] = None
    cache: dict[Key, Candidate] = field(default_factory=dict)
    sims: int = 0

    @property
    def steps(self) -> int:
        """One step, or every recorded step when replaying a trace."""
        return len({s.step for s in self.recorded}) if self.recorded else 1

    def plan(self, key: Key) -> Plan:
        mode, r, rtp, gtp, ttp = key
        return make_plan(self.exp, mode, rollout_devices=r or None, rollout_tp=rtp,
                         genrm_tp=gtp, trainer_tp=ttp)

    def __call__(self, key: Key) -> float:
        if key not in self.cache:
            plan = self.plan(key)
            trace = simulate(plan, self.exp.workload, self.cost, seed=0, steps=self.steps,
                             recorded=self.recorded)
            self.sims += 1
            stats = summarize(trace)
            self.cache[key] = Candidate(key, plan, (stats.step_time_mean,), stats, trace)
            if self.progress:
                self.progress(self.sims, plan.describe())
        return self.cache[key].step_times[0]

    def reseed(self, cand: Candidate, seeds: int) -> Candidate:
        times = list(cand.step_times)
        for s in range(len(times), seeds):
            tr = simulate(cand.plan, self.exp.workload, self.cost, seed=s, steps=self.steps,
                          recorded=self.recorded)
            self.sims += 1
            times.append(summarize(tr).step_time_mean)
            if self.progress:
                self.progress(self.sims, f"{cand.plan.describe()} seed {s}")
        return Candidate(cand.key, cand.plan, tuple(times), cand.stats, cand.trace)


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


def _coordinate_descent(f: Callable[[tuple[int, ...]], float], options: list[list[int]],
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
    TP pair's optimum). Returns (best, unimodal-unknown=True, "local", calls)."""
    seen: dict[int, float] = {}

    def ev(i: int) -> float:
        if i not in seen:
            seen[i] = f(splits[i])
        return seen[i]

    total = splits[-1] + splits[0]  # ~ cluster size
    i = min(range(len(splits)), key=lambda j: abs(splits[j] - frac * total))
    while True:
        nbrs = [j for j in (i - 1, i + 1) if 0 <= j < len(splits)]
        j = min(nbrs, key=lambda j: (ev(j), j)) if nbrs else i
        if nbrs and ev(j) < ev(i):
            i = j
        else:
            break
    return splits[i], True, "local", len(seen)


def search(exp: Experiment, cost: CostModel, *, top: int = 5, seeds: Optional[int] = None,
           exhaustive: bool = False, progress: Optional[Progress] = None,
           recorded: Optional[Sequence[SampleRecord]] = None) -> SearchResult:
    """Rank feasible placements of `exp` by simulated step time.

    recorded: replay these samples' lengths (from a trace) instead of sampling the
    workload; every recorded step is simulated and the mean step time ranks."""
    t0 = time.perf_counter()
    space = placement_space(exp)
    if space.problems:
        raise InputError("cannot place this experiment: " + "; ".join(space.problems))
    ev = _Evaluator(exp, cost, progress, recorded)
    has_genrm = exp.genrm is not None and bool(space.genrm_tps)
    gtps = space.genrm_tps if has_genrm else (1,)
    modes = exp.search.modes
    space_size = 0
    reports: list[SplitReport] = []
    best_ttp = space.trainer_tps[0]
    best_rtp, best_gtp = space.rollout_tps[0], gtps[0]

    if Mode.COLOCATE in modes or not has_genrm:
        space_size += len(space.rollout_tps) * len(gtps) * len(space.trainer_tps)
        x = _coordinate_descent(lambda k: ev((Mode.COLOCATE, 0, k[0], k[1], k[2])),
                                [list(space.rollout_tps), list(gtps), list(space.trainer_tps)],
                                exhaustive)
        best_rtp, best_gtp, best_ttp = x
    if Mode.PARTIAL in modes and has_genrm:
        space_size += sum(len(partial_splits(exp, r, g)) for r in space.rollout_tps
                          for g in gtps) * len(space.trainer_tps)
        ttps = list(space.trainer_tps) if exhaustive else [best_ttp]
        memo: dict[tuple[int, int, int], float] = {}

        def best_split(rtp: int, gtp: int, ttp: int, near: Optional[float]) -> float:
            """Best partial step time for a TP triple; `near` (a rollout fraction) warm-starts
            a local search instead of a full guarded ternary search."""
            if (rtp, gtp, ttp) in memo:
                return memo[(rtp, gtp, ttp)]
            splits = partial_splits(exp, rtp, gtp)
            if not splits:
                memo[(rtp, gtp, ttp)] = math.inf
                return math.inf
            f = lambda r: ev((Mode.PARTIAL, r, rtp, gtp, ttp))  # noqa: E731
            if near is None or exhaustive:
                r, uni, method, calls = search_split(f, splits, exhaustive=exhaustive)
            else:
                r, uni, method, calls = local_split(f, splits, near)
            reports.append(SplitReport(rtp, gtp, len(splits), calls, uni, method, r))
            memo[(rtp, gtp, ttp)] = f(r)
            return memo[(rtp, gtp, ttp)]

        g = exp.cluster.num_gpus
        for ttp in ttps:
            start = (best_rtp if best_rtp in space.rollout_tps else space.rollout_tps[0],
                     best_gtp if best_gtp in gtps else gtps[0])
            best_split(start[0], start[1], ttp, None)
            anchor = {"frac": None}

            def objective(k: tuple[int, ...], ttp=ttp) -> float:
                if anchor["frac"] is None:  # fraction of the first (full) split search
                    r0 = next(c for c in ev.cache.values()
                              if c.key[0] is Mode.PARTIAL and c.key[2:] == (start[0], start[1], ttp)
                              and c.step_times[0] == memo[(start[0], start[1], ttp)]).key[1]
                    anchor["frac"] = r0 / g
                return best_split(k[0], k[1], ttp, anchor["frac"])

            _coordinate_descent(objective, [list(space.rollout_tps), list(gtps)], exhaustive,
                                start=start)
    if not ev.cache:
        raise InputError("no placement to simulate: search.modes allows none that apply "
                         f"(modes: {[m.value for m in modes]}, GenRM: {bool(exp.genrm)})")
    ordered = sorted(ev.cache.values(), key=lambda c: (c.step_times[0], c.key))
    # keep the best of each mode in the table so the comparison is always visible
    keep: list[Candidate] = ordered[:top]
    for mode in (Mode.COLOCATE, Mode.PARTIAL):
        bm = next((c for c in ordered if c.plan.mode is mode), None)
        if bm is not None and bm not in keep:
            keep.append(bm)
    n_seeds = seeds or exp.search.seeds
    final = sorted((ev.reseed(c, n_seeds) for c in keep), key=lambda c: (c.mean, c.key))
    return SearchResult(tuple(final), space, ev.sims, space_size, tuple(reports),
                        time.perf_counter() - t0)
