"""Large clusters: the search runs on a slice of the cluster, then its shortlist is taken
back to full size (splits refined with the fluid model, finalists simulated where the
simulation budget allows).

Why apart from the search: it is the one path that prices placements with the fluid model
(`yatt.sim.fluid`) instead of SimPy, with its own budget and its own worker.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import os
from dataclasses import replace
from typing import Callable, Optional

from yatt.core.costmodel import CostModel
from yatt.core.plan import Experiment
from yatt.core.roles import Mode
from yatt.sim.fluid import FluidModel
from yatt.sim.metrics import summarize

from .candidate import Candidate, Key, Progress, SeedRun
from .refine import SplitRefinement, refine_split
from .simjobs import Evaluator, simulate_many, worker_signals
from .space import Space, partial_splits

SLICE_GPUS = 64  # search clusters above 2x this on a 1/s slice (see `search`)



def slice_experiment(exp: Experiment, factor: int) -> Experiment:
    """The same experiment on 1/factor of the nodes with 1/factor of the prompts: every
    engine and DP rank sees the same load, so placements rank the same way."""
    w = exp.workload
    return replace(exp, cluster=replace(exp.cluster, nodes=exp.cluster.nodes // factor),
                   workload=replace(w, prompts_per_step=max(1, -(-w.prompts_per_step // factor))))


def slice_factor(exp: Experiment, exhaustive: bool = False, replaying: bool = False) -> int:
    """1, or the slice `search` plans a large cluster on (1/factor of its nodes)."""
    nodes = exp.cluster.nodes
    if exhaustive or replaying or exp.cluster.num_gpus <= 2 * SLICE_GPUS:
        return 1
    return max(k for k in range(1, nodes + 1)
               if nodes % k == 0 and exp.cluster.num_gpus // k >= SLICE_GPUS)


# Full-size samples a sliced search confirms with SimPy: seed-0 simulations of the final
# candidates (then every seed) while their samples per step add up to at most this; about
# two seconds of simulation on one core. Beyond it the fluid model's numbers stand.
SIM_BUDGET_SAMPLES = 48_000


class FullSize:
    """A sliced search's shortlist taken back to full size: splits refined with the fluid
    model (`refine`), candidates ranked by it, then confirmed with SimPy within
    `SIM_BUDGET_SAMPLES`. Seeds the simulation does not cover are the fluid model's, as
    offsets from the same candidate's seed 0 (common random numbers: every candidate
    draws the same samples per seed)."""

    def __init__(self, exp: Experiment, cost: CostModel, factor: int, seeds: int,
                 progress: Optional[Progress], done: int) -> None:
        self.exp, self.cost, self.factor, self.seeds = exp, cost, factor, seeds
        self.progress, self.done = progress, done
        self.ev = Evaluator(exp, cost)
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
            out = simulate_many(self.exp, self.cost, keys, n, self.progress, self.done + evals)
            self.sims = len(keys) * n
            self.note = (f"splits refined at full size with the fluid model ({evals} fluid "
                         "evaluations); finalists simulated at full size")
            return out
        simulate_keys = keys if len(keys) * per <= SIM_BUDGET_SAMPLES else \
            keys[:1] if per <= SIM_BUDGET_SAMPLES else []
        sim = {c.key: c for c in simulate_many(self.exp, self.cost, simulate_keys, 1, self.progress,
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
        pool = mp.get_context("fork").Pool(1, initializer=worker_signals)
        _ASIDE = None
        res = pool.map_async(_fluid_steps, [0])

        def collect() -> dict:
            try:
                return res.get()[0]
            finally:
                pool.close()
                pool.join()
        return collect


_ASIDE: Optional[tuple["FullSize", list]] = None   # set around a fork only


def _fluid_work(full: "FullSize", jobs: list[tuple[Key, int]]) -> tuple[dict, dict]:
    """Fluid step times of (key, seed) jobs, and each seed's trained samples and tokens."""
    return ({j: full.step(*j) for j in jobs},
            {s: full.kept(s) for s in sorted({s for _, s in jobs})})


def _fluid_steps(_: int) -> tuple[dict, dict]:
    """In a forked worker: `_fluid_work` on the inherited jobs."""
    assert _ASIDE is not None
    full, jobs = _ASIDE
    full.progress = None
    return _fluid_work(full, jobs)


def full_space_size(exp: Experiment, space: Space) -> int:
    gtps = space.genrm_tps or (1,)
    n = len(space.rollout_tps) * len(gtps) * len(space.trainer_layouts)
    if exp.genrm is not None and Mode.PARTIAL in exp.search.modes:
        n += sum(len(partial_splits(exp, r, g)) for r in space.rollout_tps
                 for g in gtps) * len(space.trainer_layouts)
    return n
