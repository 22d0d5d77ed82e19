"""Placement search: pick mode, GPU split and TP per role by simulating candidates.

Why: the step time of a placement has no closed form (long tails, streaming, KV limits),
so the simulator is the oracle, and each call costs ~0.1-1 s. The search spends few calls:

- Full colocate: the phases run one after another, so step time is (nearly) separable in
  the TP of each role and the trainer's TP x PP layout. Coordinate descent over each
  role's feasible options finds the optimum in 1 + sum(options - 1) simulations.
- Partial colocate: for each (rollout TP, GenRM TP) pair, step time over the split
  r = rollout devices is usually unimodal (too few rollout devices: rollout-bound; too
  few GenRM devices: judge-bound). A coarse grid checks that; if the grid is unimodal,
  an integer ternary search refines inside the bracket (as WeChat-YATT describes). If it
  is not, we fall back to a bounded scan and say so. A final hill-climb checks neighbours.
  The trainer runs on every device after generation in both modes, so its layout adds the
  same time to either: partial colocate takes the layout full colocate found best (and
  searches it as a third coordinate when full colocate is not searched).
- The best few candidates are re-simulated over `search.seeds` seeds: mean +/- spread.
- Above 128 devices the search runs on a load-preserving slice, then takes its shortlist
  back to full size: splits placed at full resolution with the fluid model, finalists
  simulated where the budget allows (`search`).
- Async (generators and trainer on disjoint devices, steps overlapped): each candidate is
  simulated over `async_steps` of the largest k searched and ranked by its steady state
  (the steps after the warm-up fill). The split between generator and trainer devices gets the guarded
  ternary search at the first staleness bound k and the best TPs of the other modes; the
  other rollout TPs and k values hill-climb from that split's fraction, so async adds a
  bounded number of simulations. With a GenRM on its own devices the rollout keeps the
  share of the generator devices partial colocate found best (half without it); the GenRM
  on the rollout's devices is tried at the best split. Sliced (large-cluster) searches
  leave async out (the fluid model prices one colocate or partial step).

`exhaustive=True` simulates everything (for tests and the regret benchmark).
"""
from __future__ import annotations

import math
import multiprocessing as mp
import os
import signal
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Sequence

from yatt.core import limits
from yatt.core.errors import InputError
from yatt.core.plan import Experiment, Plan
from yatt.core.specs import Workload
from yatt.core.roles import Mode
from yatt.core.costmodel import CostModel
from yatt.core.trace import SampleRecord, Trace
from yatt.sim.metrics import StepStats, steady_window, summarize
from yatt.core.layout import make_plan
from yatt.sim.fluid import FluidModel
from yatt.sim.simulate import simulate

from .space import Space, async_splits, partial_splits, placement_space
from . import idle
from .refine import SplitRefinement, refine_split
from .splitsearch import coordinate_descent, local_split, search_split
from .why_pp import trainer_note

# mode, rollout devices (0 = all), rollout tp, genrm tp, trainer tp, trainer pp,
# GenRM devices (async with its own; else 0), max_staleness (async; else 0)
Key = tuple[Mode, int, int, int, int, int, int, int]


def async_steps(k: int) -> int:
    """Steps an async candidate is simulated over: the warm-up fill, then k + 1 steps so
    that the queue bound (rollout k steps ahead) is reached in the steady state."""
    return k + 2


def sim_steps(plan: Plan, recorded: Optional[Sequence[SampleRecord]] = None) -> int:
    """Steps one simulation of `plan` runs: every recorded step when replaying a trace,
    one for colocate and partial; for async, `async_steps` of the largest k it or its
    experiment's `search.staleness_choices` name, so every async candidate of a search
    averages the same steps (common random numbers)."""
    if recorded:
        return len({s.step for s in recorded})
    if plan.mode is not Mode.ASYNC:
        return 1
    return async_steps(max((plan.max_staleness,) + plan.experiment.search.staleness_choices))
Progress = Callable[[int, str], None]


@dataclass(frozen=True)
class SeedRun:
    """What one seed's simulation of a placement adds up to."""

    step_time: float        # mean step time over the simulated steps
    steps: int
    kept: int               # trained samples, all steps
    trained_tokens: int     # prompt + response tokens of the trained samples, all steps
    bubble: float           # idle fraction of device time

    @staticmethod
    def of(trace: Trace, stats: StepStats) -> "SeedRun":
        # the steps `stats` covers (async: its steady state, after the warm-up)
        window = steady_window(trace)
        first = window[2] if window else 0
        tokens = sum(s.prompt_tokens + s.response_tokens for s in trace.samples
                     if s.kept and s.step >= first)
        return SeedRun(stats.step_time_mean, stats.steps, stats.samples_kept, tokens,
                       stats.bubble_fraction)


@dataclass(frozen=True)
class Candidate:
    key: Key
    plan: Plan
    runs: tuple[SeedRun, ...]       # one per seed, seed 0 first
    stats: StepStats                # of the seed-0 simulation (the drawn timeline)
    trace: Optional[Trace]          # the seed-0 simulation (kept for shortlisted candidates)

    @property
    def step_times(self) -> tuple[float, ...]:
        return tuple(r.step_time for r in self.runs)

    @property
    def mean(self) -> float:
        return sum(self.step_times) / len(self.step_times)

    @property
    def spread(self) -> float:
        m = self.mean
        return math.sqrt(sum((t - m) ** 2 for t in self.step_times) / len(self.step_times))

    # Throughputs pool the same seeds as `mean`: what all seeds trained over all their step
    # time. Seeds draw the same lengths (and the same dropped groups) whatever the
    # placement, so throughput orders placements exactly as `mean` does.
    def _seconds(self) -> float:
        return sum(r.step_time * r.steps for r in self.runs)

    @property
    def samples_per_s(self) -> float:
        t = self._seconds()
        return sum(r.kept for r in self.runs) / t if t > 0 else float("nan")

    @property
    def tokens_per_s(self) -> float:
        t = self._seconds()
        return sum(r.trained_tokens for r in self.runs) / t if t > 0 else float("nan")

    @property
    def bubble(self) -> float:
        """Idle fraction of device time, mean over seeds."""
        return sum(r.bubble for r in self.runs) / len(self.runs)

    def __repr__(self) -> str:  # the trace holds every span: keep the repr one line
        return f"Candidate({self.plan.describe()!r}, {self.mean:.2f}±{self.spread:.2f} s/step)"


@dataclass(frozen=True)
class SplitReport:
    rollout_tp: int
    genrm_tp: int
    splits: int          # legal splits for this TP pair
    evaluated: int       # splits simulated
    unimodal: bool       # the coarse grid looked unimodal
    method: str          # "exhaustive" | "ternary" | "scan" | "local"
    best_rollout_devices: int
    mode: Mode = Mode.PARTIAL  # async: the split of generator and trainer devices
    staleness: int = 0         # async: the max_staleness searched
    trainer_devices: int = 0   # async: the best split's trainer devices

    def __post_init__(self) -> None:
        # "best" is a simulated split: at least one, and no more than there are
        assert 1 <= self.evaluated <= self.splits, self


@dataclass(frozen=True)
class SearchResult:
    ranked: tuple[Candidate, ...]
    space: Space
    simulations: int
    space_size: int
    split_reports: tuple[SplitReport, ...]
    seconds: float
    note: str = ""  # how the search was done, when it is not the plain direct search
    trainer_note: str = ""  # why the best plan's trainer runs a pipeline (`why_pp`)
    refinements: tuple[SplitRefinement, ...] = ()  # full-size split placements (sliced search)
    idle_note: str = ""  # why a side of the best plan waits (`idle`)

    @property
    def best(self) -> Candidate:
        return self.ranked[0]

    def best_of(self, mode: Mode) -> Optional[Candidate]:
        for c in self.ranked:
            if c.plan.mode is mode:
                return c
        return None

    def __repr__(self) -> str:
        return (f"SearchResult(best={self.best!r}, {len(self.ranked)} ranked, "
                f"{self.simulations} simulations)")


@dataclass
class _Evaluator:
    """Memoised seed-0 simulations of placements."""

    exp: Experiment
    cost: CostModel
    progress: Optional[Progress] = None
    recorded: Optional[Sequence[SampleRecord]] = None
    cache: dict[Key, Candidate] = field(default_factory=dict)
    sims: int = 0
    keep: int = 0   # keep the traces of the best `keep` (and each mode's best) only; 0: all

    def plan(self, key: Key) -> Plan:
        mode, r, rtp, gtp, ttp, tpp, g, k = key
        ref = reference_layout(self.exp, rtp, ttp, tpp)
        return make_plan(self.exp, mode, rollout_devices=r or None, rollout_tp=rtp,
                         genrm_tp=gtp, trainer_tp=ttp, trainer_pp=tpp, reference_tp=ref[0],
                         reference_pp=ref[1], genrm_devices=g, max_staleness=max(1, k))

    def __call__(self, key: Key) -> float:
        if key not in self.cache:
            plan = self.plan(key)
            trace = simulate(plan, self.exp.workload, self.cost, seed=0,
                             steps=sim_steps(plan, self.recorded), recorded=self.recorded)
            self.sims += 1
            stats = summarize(trace)
            self.cache[key] = Candidate(key, plan, (SeedRun.of(trace, stats),), stats, trace)
            if self.keep:
                self._drop_traces()
            if self.progress:
                self.progress(self.sims, plan.describe())
        return self.cache[key].step_times[0]

    def _drop_traces(self) -> None:
        """Memory stays bounded by the shortlist: a candidate that cannot be shortlisted
        any more never needs its trace (only shortlisted ones are shown and plotted)."""
        short = {c.key for c in _shortlist(list(self.cache.values()), self.keep)}
        for k, c in self.cache.items():
            if c.trace is not None and k not in short:
                self.cache[k] = replace(c, trace=None)



SLICE_GPUS = 64  # search clusters above 2x this on a 1/s slice (see `search`)


def reference_layout(exp: Experiment, rollout_tp: int, trainer_tp: int,
                     trainer_pp: int) -> tuple[int, int]:
    """The reference is an inference-only copy of the actor: the trainer's TP x PP when the
    engine TP choices allow its TP (the executor may restrict them), else the rollout
    engines' TP."""
    return (trainer_tp, trainer_pp) if trainer_tp in exp.search.engine_tps else (rollout_tp, 1)


@dataclass(frozen=True)
class _Found:
    """What the direct search found: every evaluated candidate and how splits were searched."""

    evaluator: "_Evaluator"
    reports: tuple[SplitReport, ...]
    space_size: int


def _search_direct(exp: Experiment, cost: CostModel, space: Space, exhaustive: bool,
                   progress: Optional[Progress], recorded: Optional[Sequence[SampleRecord]],
                   keep: int = 0) -> _Found:
    ev = _Evaluator(exp, cost, progress, recorded, keep=keep)
    has_genrm = exp.genrm is not None and bool(space.genrm_tps)
    gtps = space.genrm_tps if has_genrm else (1,)
    layouts = list(space.trainer_layouts)
    modes = exp.search.modes
    space_size = 0
    reports: list[SplitReport] = []
    best = (space.rollout_tps[0], gtps[0], layouts[0])
    colocate = Mode.COLOCATE in modes or not has_genrm

    if colocate:
        space_size += len(space.rollout_tps) * len(gtps) * len(layouts)
        best = coordinate_descent(lambda k: ev((Mode.COLOCATE, 0, k[0], k[1], *k[2], 0, 0)),
                                  [list(space.rollout_tps), list(gtps), layouts], exhaustive)
    if Mode.PARTIAL in modes and has_genrm:
        space_size += sum(len(partial_splits(exp, r, g)) for r in space.rollout_tps
                          for g in gtps) * len(layouts)
        g_total = exp.cluster.num_gpus
        memo: dict[tuple[int, int, tuple[int, int]], tuple[float, int]] = {}
        anchor: list[float] = []  # rollout fraction of the first full split search

        def best_split(rtp: int, gtp: int, lay: tuple[int, int]) -> float:
            """Best partial step time for a (rollout TP, GenRM TP, trainer layout). The
            first gets the guarded ternary search; later ones hill-climb from the first
            one's rollout fraction."""
            if (rtp, gtp, lay) not in memo:
                splits = partial_splits(exp, rtp, gtp)
                if not splits:
                    memo[(rtp, gtp, lay)] = (math.inf, 0)
                else:
                    f = lambda r: ev((Mode.PARTIAL, r, rtp, gtp, *lay, 0, 0))  # noqa: E731
                    if exhaustive or not anchor:
                        r, uni, method, calls = search_split(f, splits, exhaustive=exhaustive)
                        anchor.append(r / g_total)
                    else:
                        r, uni, method, calls = local_split(f, splits, anchor[0])
                    reports.append(SplitReport(rtp, gtp, len(splits), calls, uni, method, r))
                    memo[(rtp, gtp, lay)] = (f(r), r)
            return memo[(rtp, gtp, lay)][0]

        if exhaustive or colocate:
            for lay in (layouts if exhaustive else [best[2]]):
                coordinate_descent(lambda k, lay=lay: best_split(k[0], k[1], lay),
                                   [list(space.rollout_tps), list(gtps)], exhaustive,
                                   start=(best[0], best[1]))
        else:  # no full-colocate search chose the trainer layout: search it here
            coordinate_descent(lambda k: best_split(*k), [list(space.rollout_tps), list(gtps), layouts],
                               False, start=best)
    if Mode.ASYNC in modes:
        space_size += _search_async(exp, ev, space, reports, exhaustive)
    if not ev.cache:
        raise InputError("no placement to simulate: search.modes allows none that apply "
                         f"(modes: {[m.value for m in modes]}, GenRM: {bool(exp.genrm)})")
    return _Found(ev, tuple(reports), space_size)


def _search_async(exp: Experiment, ev: "_Evaluator", space: Space, reports: list[SplitReport],
                  exhaustive: bool) -> int:
    """Async candidates into `ev` (see the module docstring); returns how many placements
    the async space holds."""
    n = exp.cluster.num_gpus
    has_genrm = exp.genrm is not None and bool(space.genrm_tps)
    gtps = space.genrm_tps if has_genrm else (1,)
    ks = tuple(dict.fromkeys(exp.search.staleness_choices))
    done = list(ev.cache.values())
    start = min(done, key=lambda c: (c.step_times[0], c.key)).key if done else None
    rtp0 = start[2] if start else space.rollout_tps[0]
    gtp0 = start[3] if start else gtps[0]
    layouts = list(space.trainer_layouts)
    share: Optional[float] = None
    if has_genrm:
        part = [c for c in done if c.plan.mode is Mode.PARTIAL]
        best_part = min(part, key=lambda c: (c.step_times[0], c.key)) if part else None
        share = best_part.key[1] / n if best_part else 0.5

    def splits(rtp: int, lay: tuple[int, int], sh: Optional[float]) -> list[tuple[int, int]]:
        ref = reference_layout(exp, rtp, *lay)
        return async_splits(exp, rtp, gtp0, lay, ref[0], sh)

    # the trainer layout: the other modes' best where it fits on some async share, else
    # the first that does
    lay0 = next((lay for lay in ([start[4:6]] if start else []) + layouts
                 if splits(rtp0, lay, share)), None)
    size = sum(len(splits(r, lay, share)) for r in space.rollout_tps for lay in layouts) * len(ks)
    if lay0 is None:
        return size
    anchor: list[float] = []
    memo: dict[tuple[int, int], float] = {}

    def best_split(rtp: int, k: int) -> float:
        if (rtp, k) not in memo:
            sp = splits(rtp, lay0, share)
            if not sp:
                memo[(rtp, k)] = math.inf
                return math.inf
            d_list = [r + g for r, g in sp]
            by_d = dict(zip(d_list, sp))

            def f(d: int) -> float:
                r, g = by_d[d]
                return ev((Mode.ASYNC, r, rtp, gtp0, *lay0, g, k))
            if exhaustive or not anchor:
                d, uni, method, calls = search_split(f, d_list, exhaustive=exhaustive)
                anchor.append(d / n)
            else:
                d, uni, method, calls = local_split(f, d_list, anchor[0])
            reports.append(SplitReport(rtp, gtp0, len(sp), calls, uni, method, by_d[d][0],
                                       mode=Mode.ASYNC, staleness=k, trainer_devices=n - d))
            memo[(rtp, k)] = f(d)
        return memo[(rtp, k)]

    best_split(rtp0, ks[0])
    rtp = coordinate_descent(lambda x: best_split(x[0], ks[0]), [list(space.rollout_tps)],
                             exhaustive, start=(rtp0,))[0]
    for k in ks[1:]:
        best_split(rtp, k)
    if has_genrm:  # the GenRM on the rollout's devices, at the best async split so far
        best = min((c for c in ev.cache.values() if c.plan.mode is Mode.ASYNC),
                   key=lambda c: (c.step_times[0], c.key), default=None)
        if best is not None:
            d = best.key[1] + best.key[6]
            if (d, 0) in splits(best.key[2], lay0, None):
                ev((Mode.ASYNC, d, best.key[2], gtp0, *lay0, 0, best.key[7]))
    return size


def _shortlist(cands: Sequence[Candidate], top: int) -> list[Candidate]:
    """The best `top` candidates plus the best of each mode (so the comparison shows)."""
    ordered = sorted(cands, key=lambda c: (c.step_times[0], c.key))
    keep = ordered[:top]
    for mode in (Mode.COLOCATE, Mode.PARTIAL, Mode.ASYNC):
        bm = next((c for c in ordered if c.plan.mode is mode), None)
        if bm is not None and bm not in keep:
            keep.append(bm)
    return keep


def slice_experiment(exp: Experiment, factor: int) -> Experiment:
    """The same experiment on 1/factor of the nodes with 1/factor of the prompts: every
    engine and DP rank sees the same load, so placements rank the same way."""
    w = exp.workload
    return replace(exp, cluster=replace(exp.cluster, nodes=exp.cluster.nodes // factor),
                   workload=replace(w, prompts_per_step=max(1, -(-w.prompts_per_step // factor))))


def placeable_space(exp: Experiment) -> Space:
    """The placement space; InputError, naming the field to change, when it is empty."""
    space = placement_space(exp)
    if space.problems:
        raise InputError("cannot place this experiment: " + "; ".join(space.problems),
                         field=space.problem_field)
    return space


def slice_factor(exp: Experiment, exhaustive: bool = False, replaying: bool = False) -> int:
    """1, or the slice `search` plans a large cluster on (1/factor of its nodes)."""
    nodes = exp.cluster.nodes
    if exhaustive or replaying or exp.cluster.num_gpus <= 2 * SLICE_GPUS:
        return 1
    return max(k for k in range(1, nodes + 1)
               if nodes % k == 0 and exp.cluster.num_gpus // k >= SLICE_GPUS)


def search(exp: Experiment, cost: CostModel, *, top: int = 5, seeds: Optional[int] = None,
           exhaustive: bool = False, progress: Optional[Progress] = None,
           recorded: Optional[Sequence[SampleRecord]] = None) -> SearchResult:
    """Rank feasible placements of `exp` by simulated step time.

    Large clusters (more than 2 x SLICE_GPUS devices, not exhaustive, not replaying) are
    searched on a slice (`slice_experiment`): same per-engine load, ~1/factor the
    simulation cost. The slice's best placements are then taken back to full size
    (`_FullSize`): each partial split refined at full resolution with the fluid model
    (`yatt.sim.fluid`, `refine`), the finalists simulated at full size within
    SIM_BUDGET_SAMPLES and priced by the fluid model beyond it; `note` says which.

    recorded: replay these samples' lengths (from a trace) instead of sampling the
    workload; every recorded step is simulated and the mean step time ranks.
    """
    t0 = time.perf_counter()
    space = placeable_space(exp)
    n_seeds = seeds or exp.search.seeds
    factor = slice_factor(exp, exhaustive, recorded is not None)
    if factor == 1:
        found = _search_direct(exp, cost, space, exhaustive, progress, recorded, keep=top)
        ev = found.evaluator
        short = _shortlist(list(ev.cache.values()), top)
        final = _reseed_many(exp, cost, short, n_seeds, progress, ev.sims, recorded)
        sims = ev.sims + sum(len(c.step_times) - 1 for c in final)
        slice_note = ""
        origin = {c.key: c.key for c in final}
        refinements: tuple[SplitRefinement, ...] = ()
    else:
        small = slice_experiment(exp, factor)
        if Mode.ASYNC in small.search.modes:   # the fluid model prices no async step
            modes = tuple(m for m in small.search.modes if m is not Mode.ASYNC)
            small = replace(small, search=replace(small.search, modes=modes or (Mode.COLOCATE,)))
        found = _search_direct(small, cost, placement_space(small), False, progress, None,
                               keep=min(top, 2))
        short = _shortlist(list(found.evaluator.cache.values()), min(top, 2))
        full = _FullSize(exp, cost, factor, n_seeds, progress, found.evaluator.sims)
        final, origin, refinements = full.run(short)
        sims = found.evaluator.sims + full.sims
        c = small.cluster
        slice_note = (f"searched on a 1/{factor} slice ({c.num_gpus} GPUs, "
                      f"{small.workload.prompts_per_step} prompts); " + full.note)
        if Mode.ASYNC in exp.search.modes:
            slice_note += ("; async not searched (the fluid model that places splits at full "
                           "size prices synchronous steps only)")
    final.sort(key=lambda c: (c.mean, c.key))
    best = final[0].key
    tried = {c.key[4:6]: c.step_times[0] for c in found.evaluator.cache.values()
             if c.key[:4] == origin[best][:4] and c.key[6:] == origin[best][6:]}
    return SearchResult(tuple(final), space, sims, found.space_size if factor == 1 else
                        _full_space_size(exp, space), found.reports, time.perf_counter() - t0,
                        slice_note, trainer_note(exp, space, final[0].plan, tried), refinements,
                        idle.idle_note(final[0].trace, cost))


# Full-size samples a sliced search confirms with SimPy: seed-0 simulations of the final
# candidates (then every seed) while their samples per step add up to at most this; about
# two seconds of simulation on one core. Beyond it the fluid model's numbers stand.
SIM_BUDGET_SAMPLES = 48_000


class _FullSize:
    """A sliced search's shortlist taken back to full size: splits refined with the fluid
    model (`refine`), candidates ranked by it, then confirmed with SimPy within
    `SIM_BUDGET_SAMPLES`. Seeds the simulation does not cover are the fluid model's, as
    offsets from the same candidate's seed 0 (common random numbers: every candidate
    draws the same samples per seed)."""

    def __init__(self, exp: Experiment, cost: CostModel, factor: int, seeds: int,
                 progress: Optional[Progress], done: int) -> None:
        self.exp, self.cost, self.factor, self.seeds = exp, cost, factor, seeds
        self.progress, self.done = progress, done
        self.ev = _Evaluator(exp, cost)
        self.fluid = FluidModel(cost)
        self.steps: dict[tuple[Key, int], float] = {}
        self.pooled: dict[int, tuple[int, int]] = {}
        self.sims = 0
        self.note = ""

    def step(self, key: Key, seed: int = 0) -> float:
        if (key, seed) not in self.steps:
            st = self.fluid.step(self.ev.plan(key), self.exp.workload, seed)
            self.steps[(key, seed)] = st.step_time
            if self.progress:
                self.progress(self.done + len(self.steps), "fluid model at full size")
        return self.steps[(key, seed)]

    def run(self, short: list[Candidate]
            ) -> tuple[list[Candidate], dict[Key, Key], tuple[SplitRefinement, ...]]:
        origin: dict[Key, Key] = {}
        refinements = []
        placed: set[Key] = set()
        for c in short:
            key = (c.key[0], c.key[1] * self.factor, *c.key[2:])
            config = (key[0], 0, *key[2:])
            if config in placed:  # one split per TP pair and layout: its slice's best
                continue
            placed.add(config)
            if key[0] is Mode.PARTIAL:
                rtp, gtp = key[2], key[3]
                ref = refine_split(self.exp, lambda r, k=key: self.step((k[0], r, *k[2:])), rtp,
                                   gtp, key[1], math.lcm(rtp, gtp) * self.factor)
                refinements.append(ref)
                key = (key[0], ref.best, *key[2:])
            else:
                self.step(key)
            origin.setdefault(key, c.key)
        ranked = sorted(origin, key=lambda k: (self.step(k), k))
        keys = ranked[:2]
        for mode in (Mode.COLOCATE, Mode.PARTIAL, Mode.ASYNC):
            bm = next((k for k in ranked if k[0] is mode), None)
            if bm is not None and bm not in keys:
                keys.append(bm)
        return self._confirm(keys), origin, tuple(refinements)

    def _confirm(self, keys: list[Key]) -> list[Candidate]:
        w, n = self.exp.workload, self.seeds
        per = w.samples_per_step
        evals = len(self.steps)
        if len(keys) * n * per <= SIM_BUDGET_SAMPLES:
            out = _simulate_many(self.exp, self.cost, keys, n, self.progress, self.done + evals)
            self.sims = len(keys) * n
            self.note = (f"splits refined at full size with the fluid model ({evals} fluid "
                         "evaluations); finalists simulated at full size")
            return out
        simulate_keys = keys if len(keys) * per <= SIM_BUDGET_SAMPLES else \
            keys[:1] if per <= SIM_BUDGET_SAMPLES else []
        sim = {c.key: c for c in _simulate_many(self.exp, self.cost, simulate_keys, 1, self.progress,
                                                self.done + evals)} if simulate_keys else {}
        self.sims = len(simulate_keys)
        pending = self._seeds_aside([(k, s) for k in keys for s in range(1, n)])
        out = [self._candidate(k, sim.get(k), samples=i == 0) for i, k in enumerate(keys)]
        steps, self.pooled = pending()
        self.steps.update(steps)
        out = [self._with_seeds(c) for c in out]
        if not sim:
            how = (f"finalists priced by the fluid model at full size ({per:,} samples per step: "
                   f"a full simulation is past the planning budget of {SIM_BUDGET_SAMPLES:,})")
        else:
            which = "finalists" if len(sim) == len(keys) else "the fluid model's best"
            how = f"{which} simulated at full size, seed 0"
            if n > 1:
                how += f"; seeds 1-{n - 1} from the fluid model, offset to seed 0's simulation"
        self.note = (f"splits refined at full size with the fluid model ({len(self.steps)} fluid "
                     f"evaluations); " + how)
        return out

    def _candidate(self, key: Key, sim: Optional[Candidate], samples: bool) -> Candidate:
        """Seed 0: simulated (`sim`) or the fluid model's (its trace with the samples only
        for the one drawn)."""
        plan = self.ev.plan(key)
        w = self.exp.workload
        if sim is None:
            trace = self.fluid.trace(plan, w, 0, samples=samples)
            stats = summarize(trace)
            first = SeedRun(trace.meta.extra["steps"][0]["step_time_s"], 1, *self.kept(0),
                            stats.bubble_fraction)
        else:
            trace, stats, first = sim.trace, sim.stats, sim.runs[0]
        return Candidate(key, plan, (first,), stats, trace)

    def _with_seeds(self, c: Candidate) -> Candidate:
        """Seeds 1.. from the fluid model, offset by seed 0's difference to `c`'s seed 0."""
        first = c.runs[0]
        shift = first.step_time - self.step(c.key, 0)
        runs = [first]
        for seed in range(1, self.seeds):
            runs.append(SeedRun(self.step(c.key, seed) + shift, 1, *self.pooled[seed], first.bubble))
        return Candidate(c.key, c.plan, tuple(runs), c.stats, c.trace)

    def kept(self, seed: int) -> tuple[int, int]:
        """Trained samples and tokens of a seed's step (the same for every placement)."""
        pool = self.fluid.pool(self.exp.workload, seed)
        kept = pool.kept
        return int(kept.sum()), int((pool.prompt_tokens + pool.response_tokens)[kept].sum())

    def _seeds_aside(self, jobs: list[tuple[Key, int]]) -> Callable[[], dict]:
        """Fluid step times of (key, seed) jobs in a forked worker while this process draws
        the finalists' traces; returns a function that collects them (serial where there is
        one core or no fork)."""
        jobs = [j for j in jobs if j not in self.steps]
        if not jobs or (os.cpu_count() or 1) < 2 or "fork" not in mp.get_all_start_methods():
            return lambda: _fluid_work(self, jobs)
        global _ASIDE
        _ASIDE = (self, jobs)   # the forked worker inherits it: nothing large is pickled
        pool = mp.get_context("fork").Pool(1)
        _ASIDE = None
        res = pool.map_async(_fluid_steps, [0])

        def collect() -> dict:
            try:
                return res.get()[0]
            finally:
                pool.close()
                pool.join()
        return collect


_ASIDE: Optional[tuple["_FullSize", list]] = None   # set around a fork only


def _fluid_work(full: "_FullSize", jobs: list[tuple[Key, int]]) -> tuple[dict, dict]:
    """Fluid step times of (key, seed) jobs, and each seed's trained samples and tokens."""
    return ({j: full.step(*j) for j in jobs},
            {s: full.kept(s) for s in sorted({s for _, s in jobs})})


def _fluid_steps(_: int) -> tuple[dict, dict]:
    """In a forked worker: `_fluid_work` on the inherited jobs."""
    assert _ASIDE is not None
    full, jobs = _ASIDE
    full.progress = None
    return _fluid_work(full, jobs)


Job = tuple[Plan, Workload, CostModel, int, Optional[Sequence[SampleRecord]]]


def _steps(job: Job) -> int:
    return sim_steps(job[0], job[4])


def _one(job: Job) -> tuple[SeedRun, Optional[Trace]]:
    plan, workload, cost, seed, recorded = job
    with limits.unmetered():   # charged by `_run_jobs` in the parent process
        trace = simulate(plan, workload, cost, seed=seed, steps=_steps(job), recorded=recorded)
    return SeedRun.of(trace, summarize(trace)), (trace if seed == 0 else None)


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the parent: it stops the pool and exits with one line
    (a worker that also took the signal would print its own traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_jobs(jobs: list[Job], progress: Optional[Progress],
              done: int) -> list[tuple[SeedRun, Optional[Trace]]]:
    """Run independent simulations side by side on the machine's cores (fork-based pool;
    serial where there is one core or one job)."""
    for plan, workload, _, _, recorded in jobs:
        steps = sim_steps(plan, recorded)
        limits.charge(limits.sim_requests(workload.expected_requests if recorded is None
                                          else len(recorded) / steps, plan.cluster.num_gpus, steps))
    workers = min(len(jobs), os.cpu_count() or 1, 8)
    results: list[tuple[SeedRun, Optional[Trace]]] = []
    if workers > 1 and "fork" in mp.get_all_start_methods():
        with mp.get_context("fork").Pool(workers, initializer=_ignore_sigint) as pool:
            for r in pool.imap(_one, jobs):
                results.append(r)
                if progress:
                    progress(done + len(results), "re-simulating the shortlist")
    else:
        for j in jobs:
            results.append(_one(j))
            if progress:
                progress(done + len(results), "re-simulating the shortlist")
    return results


def _reseed_many(exp: Experiment, cost: CostModel, cands: list[Candidate], seeds: int,
                 progress: Optional[Progress], done: int,
                 recorded: Optional[Sequence[SampleRecord]]) -> list[Candidate]:
    """Add seeds 1..seeds-1 to each candidate (which already has seed 0)."""
    jobs = [(c.plan, exp.workload, cost, s, recorded) for c in cands for s in range(1, seeds)]
    res = _run_jobs(jobs, progress, done) if jobs else []
    k = seeds - 1
    return [Candidate(c.key, c.plan, c.runs + tuple(r for r, _ in res[i * k:(i + 1) * k]),
                      c.stats, c.trace) for i, c in enumerate(cands)]


def _simulate_many(exp: Experiment, cost: CostModel, keys: list[Key], seeds: int,
                   progress: Optional[Progress], done: int) -> list[Candidate]:
    """Simulate each placement over `seeds` seeds, side by side on the machine's cores."""
    ev = _Evaluator(exp, cost)
    jobs: list[Job] = [(ev.plan(k), exp.workload, cost, s, None) for k in keys for s in range(seeds)]
    results = _run_jobs(jobs, progress, done)
    out = []
    for i, k in enumerate(keys):
        chunk = results[i * seeds:(i + 1) * seeds]
        trace = chunk[0][1]
        assert trace is not None
        out.append(Candidate(k, jobs[i * seeds][0], tuple(r for r, _ in chunk), summarize(trace), trace))
    return out


def _full_space_size(exp: Experiment, space: Space) -> int:
    gtps = space.genrm_tps or (1,)
    n = len(space.rollout_tps) * len(gtps) * len(space.trainer_layouts)
    if exp.genrm is not None and Mode.PARTIAL in exp.search.modes:
        n += sum(len(partial_splits(exp, r, g)) for r in space.rollout_tps
                 for g in gtps) * len(space.trainer_layouts)
    return n
