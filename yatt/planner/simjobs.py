"""Running simulations of placements: a memoised seed-0 evaluator for the search, and
seeds run side by side on the machine's cores (a fork-based pool).

Why apart from the search: the direct search, the full-size confirmation of a sliced
search and the benchmarks all simulate placements the same way.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

from yatt.core import limits
from yatt.core.costmodel import CostModel
from yatt.core.layout import make_plan
from yatt.core.plan import Experiment, Plan
from yatt.core.specs import Workload
from yatt.core.trace import SampleRecord, Trace
from yatt.sim.metrics import summarize
from yatt.sim.simulate import simulate

from .candidate import Candidate, Key, Progress, SeedRun, shortlist, sim_steps

def reference_layout(exp: Experiment, rollout_tp: int, trainer_tp: int,
                     trainer_pp: int) -> tuple[int, int]:
    """The reference is an inference-only copy of the actor: the trainer's TP x PP when the
    engine TP choices allow its TP (the executor may restrict them), else the rollout
    engines' TP."""
    return (trainer_tp, trainer_pp) if trainer_tp in exp.search.engine_tps else (rollout_tp, 1)



@dataclass
class Evaluator:
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
        short = {c.key for c in shortlist(list(self.cache.values()), self.keep)}
        for k, c in self.cache.items():
            if c.trace is not None and k not in short:
                self.cache[k] = replace(c, trace=None)


Job = tuple[Plan, Workload, CostModel, int, Optional[Sequence[SampleRecord]]]


def _steps(job: Job) -> int:
    return sim_steps(job[0], job[4])


def _one(job: Job) -> tuple[SeedRun, Optional[Trace]]:
    plan, workload, cost, seed, recorded = job
    with limits.unmetered():   # charged by `_run_jobs` in the parent process
        trace = simulate(plan, workload, cost, seed=seed, steps=_steps(job), recorded=recorded)
    return SeedRun.of(trace, summarize(trace)), (trace if seed == 0 else None)


def worker_signals() -> None:
    """A forked pool worker's signals. Ctrl-C is left to the parent: it stops the pool and
    exits with one line (a worker that also took the signal would print its own traceback).
    SIGTERM ends the worker: the pool stops its workers with it, and a Python handler
    inherited from the parent (a driver's, which only notes the signal) would leave the
    worker alive and the pool's join waiting forever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


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
        with mp.get_context("fork").Pool(workers, initializer=worker_signals) as pool:
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


def reseed_many(exp: Experiment, cost: CostModel, cands: list[Candidate], seeds: int,
                 progress: Optional[Progress], done: int,
                 recorded: Optional[Sequence[SampleRecord]]) -> list[Candidate]:
    """Add seeds 1..seeds-1 to each candidate (which already has seed 0)."""
    jobs = [(c.plan, exp.workload, cost, s, recorded) for c in cands for s in range(1, seeds)]
    res = _run_jobs(jobs, progress, done) if jobs else []
    k = seeds - 1
    return [Candidate(c.key, c.plan, c.runs + tuple(r for r, _ in res[i * k:(i + 1) * k]),
                      c.stats, c.trace) for i, c in enumerate(cands)]


def simulate_many(exp: Experiment, cost: CostModel, keys: list[Key], seeds: int,
                   progress: Optional[Progress], done: int) -> list[Candidate]:
    """Simulate each placement over `seeds` seeds, side by side on the machine's cores."""
    ev = Evaluator(exp, cost)
    jobs: list[Job] = [(ev.plan(k), exp.workload, cost, s, None) for k in keys for s in range(seeds)]
    results = _run_jobs(jobs, progress, done)
    out = []
    for i, k in enumerate(keys):
        chunk = results[i * seeds:(i + 1) * seeds]
        trace = chunk[0][1]
        assert trace is not None
        out.append(Candidate(k, jobs[i * seeds][0], tuple(r for r, _ in chunk), summarize(trace), trace))
    return out
