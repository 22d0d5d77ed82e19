"""Fluid step model: a plan's step time at full size in tens of milliseconds, to rank.

Why: the SimPy simulation is event-exact but costs seconds at thousands of devices (an
event per finished request), too much to scan a GPU split at full resolution. This model
keeps what decides a step's length at scale and vectorises it:

- Batch dispatch (every colocate round, the first partial round) is computed per engine
  as the simulator does it, vectorised over engines: requests in finish-step order, one
  decode interval per distinct finish step, the prefill owed up front; an engine whose
  requests do not all fit (max_num_seqs, KV) runs the same continuous batching in a loop.
  Decode intervals are priced from a table of `decode_step_time` at the interval's mean
  context (interpolated), not by `decode_time`.
- Streamed judging (partial colocate) is mean-field, integrated on a time grid: the GenRM
  engines share the arrivals and each holds the pool's mean batch; a request waits for a
  slot (max_num_seqs), pays its prefill as priority work drained at the pool's rate, then
  decodes at the step rate of the mean batch; the rollout's own clock stops while the
  waiting requests exceed the queue capacity (the router's back-pressure).
- Dynamic sampling resolves groups from their judgements and launches replacements in the
  simulator's order; a replacement request decodes at the batch of the least-loaded engine.
- The finish phases use the simulator's own switch and weight-sync arithmetic; the trainer
  passes take a near-balanced split (snake order), not the executor's balancing, priced
  once per trainer layout on seed 0's samples.

It draws the same samples as the simulator (`step_pool`), so placements are compared on
common random numbers. It is a ranking model: the planner confirms what it chooses with the
SimPy simulation where that is affordable, and tests bound its error against SimPy.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from heapq import heappop, heappush
from typing import Optional

import numpy as np

from yatt.core import (CostModel, Mode, Phase, Plan, RewardSource, Role, SpanRecord, Trace,
                       Workload)
from yatt.core.schedule import step_schedule

from .contention import engine_cost
from .fluid_engines import (EngineRole, JudgeStream, StepTable, batch_times, busy_spans,
                            least_loaded)
from .pool import StepPool, sample_records, step_pool
from .handoffs import switch, weight_sync
from .trainer import Split, rank_phase, train_epochs

HEAVY = 8           # trainer ranks priced per pass (the most loaded under the snake split)


@dataclass(frozen=True)
class FluidStep:
    """One step as the fluid model sees it (seconds from the step's start)."""

    step_time: float
    rollout_end: float      # the rollout's last work (a partial step's early release)
    genrm_end: float        # the last judgement (= rollout_end without a GenRM)
    trainer_s: float        # finish phases: release, trainer passes, reload, weight sync


class FluidModel:
    """Fluid step times for plans of one experiment; caches step tables and the trainer's
    finish phases across calls (they do not depend on the GPU split)."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self._tables: dict[tuple, StepTable] = {}
        self._pools: dict[tuple, tuple[Workload, StepPool]] = {}
        self._trainer: dict[tuple, float] = {}
        self._lengths: dict[tuple, dict[int, float]] = {}
        self._roles: dict[tuple, EngineRole] = {}

    # ---- public ----------------------------------------------------------------------
    def pool(self, workload: Workload, seed: int) -> StepPool:
        """Step 0's samples for `seed`, as the simulator draws them (cached)."""
        hit = self._pools.get((id(workload), seed))
        if hit is None or hit[0] is not workload:
            hit = self._pools[(id(workload), seed)] = (workload, step_pool(workload, 0, seed))
        return hit[1]

    def step(self, plan: Plan, workload: Workload, seed: int = 0) -> FluidStep:
        return _FluidStep(self, plan, self.pool(workload, seed)).run()

    def trace(self, plan: Plan, workload: Workload, seed: int = 0, samples: bool = True) -> Trace:
        """The step as a Trace (meta.extra["model"] = "fluid"): engine spans from the
        per-engine schedules where they are computed; a GenRM pool in the mean field shows
        its occupancy (engine k busy while more than k engines' worth of requests run).
        `samples=False`: spans only (cheaper; the samples are the pool's)."""
        st = _FluidStep(self, plan, self.pool(workload, seed), trace=True)
        return st.as_trace(st.run(), seed, samples)

    # ---- shared pieces -----------------------------------------------------------------
    def per_length(self, fn, model, tp: int, tokens: np.ndarray) -> np.ndarray:
        """fn(model, tp, x) for each element, one call per distinct length (memoised)."""
        memo = self._lengths.setdefault((fn.__name__, model.name, tp), {})
        u, inv = np.unique(tokens, return_inverse=True)
        vals = []
        for x in u.tolist():
            v = memo.get(x)
            if v is None:
                v = memo[x] = fn(model, tp, x)
            vals.append(v)
        return np.array(vals, float)[inv]

    def table(self, plan: Plan, role: Role, cost: CostModel, factor: float, cmax: float) -> StepTable:
        """The step table of a role's engines (`cost`: their contended cost model, slower
        by `factor`)."""
        pl = plan.placement(role)
        eng = plan.experiment.engine
        bmax = eng.max_num_seqs if role is Role.ROLLOUT else eng.genrm_max_num_seqs
        key = (factor, plan.model_for(role).name, pl.tp, bmax, round(cmax, -2))
        tab = self._tables.get(key)
        if tab is None:
            tab = self._tables[key] = StepTable(cost, plan.model_for(role), pl.tp, bmax, cmax)
        return tab


class _FluidStep:
    def __init__(self, fm: FluidModel, plan: Plan, pool: StepPool, trace: bool = False) -> None:
        self.fm, self.plan, self.pool, self.cost = fm, plan, pool, fm.cost
        self.tracing = trace
        self.spans: list[SpanRecord] = []
        n = pool.n
        self.rollout_end = np.full(n, np.nan)
        self.genrm_end = np.full(n, np.nan)
        self.rounds = 1
        algo = plan.experiment.algo
        self.has_genrm = algo.reward is RewardSource.GENRM and plan.has(Role.GENRM)
        self.sched = step_schedule(plan.mode, genrm=self.has_genrm,
                                   reference=algo.use_reference and plan.has(Role.REFERENCE),
                                   old_logprobs=algo.old_logprobs)
        self.work_end: dict[Role, float] = {}
        g = pool.groups
        self.group_of = np.repeat(np.arange(g), pool.group_size)
        self.cap = int(pool.group_round.max()) if g else 0

    # ---- engines -----------------------------------------------------------------------
    def _role(self, role: Role, busy: int) -> EngineRole:
        """The role's engines on this plan; per-sample arrays cached per (model, TP, pool)."""
        plan, cost = self.plan, self.cost
        pl, model = plan.placement(role), plan.model_for(role)
        phase = Phase.ROLLOUT if role is Role.ROLLOUT else Phase.GENRM
        ec = engine_cost(cost, phase, busy, model)
        k = ec.factor if ec is not cost else 1.0
        key = (role, model.name, pl.tp, k, id(self.pool))
        hit = self.fm._roles.get(key)
        if hit is not None:
            return replace(hit, engines=len(pl.groups()))
        eng = plan.experiment.engine
        pool = self.pool
        if role is Role.ROLLOUT:
            inp, out = pool.prompt_tokens, pool.response_tokens
        else:
            inp, out = pool.genrm_in, pool.genrm_out
        pf = k * self.fm.per_length(cost.prefill_time, model, pl.tp, inp)
        pj = k * self.fm.per_length(cost.prefill_join_time, model, pl.tp, inp)

        def call(n: int) -> float:
            return k * cost.engine_call_time(model, n)
        kv = int(cost.kv_capacity_tokens(model, pl.tp, eng.gpu_memory_utilization))
        max_seqs = eng.max_num_seqs if role is Role.ROLLOUT else eng.genrm_max_num_seqs
        cmax = float(inp.max() + out.max()) if len(inp) else 2.0
        table = self.fm.table(plan, role, ec, k, cmax)
        steps = np.maximum(1, out).astype(np.int64)
        rank = np.empty(len(steps), np.int64)          # place in (finish step, index) order
        rank[np.lexsort((np.arange(len(steps)), steps))] = np.arange(len(steps))
        r = self.fm._roles[key] = EngineRole(len(pl.groups()), pl.tp, max(1, kv), max_seqs,
                                        inp.astype(np.int64), steps, pf, pj, call, table, rank)
        return r

    def _busy_spans(self, role: Role, eng: np.ndarray, start: np.ndarray, end: np.ndarray,
                    label: str) -> None:
        if self.tracing and len(eng):
            self.spans += busy_spans(role, self.plan.placement(role).groups(), eng, start, end,
                                     label)

    def _members(self, groups: np.ndarray) -> np.ndarray:
        p = self.pool
        if not len(groups):
            return np.zeros(0, np.int64)
        size = p.group_size[groups]
        first = np.repeat(p.group_start[groups], size)
        offset = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
        return first + offset

    def _resolved(self, items: np.ndarray, judged: np.ndarray) -> dict[int, float]:
        """Group -> time its last member was judged."""
        g = self.group_of[items]
        out = np.full(self.pool.groups, -np.inf)
        np.maximum.at(out, g, judged)
        return {int(k): float(out[k]) for k in np.unique(g)}

    # ---- modes -------------------------------------------------------------------------
    def run(self) -> FluidStep:
        if self.plan.mode is Mode.ASYNC:
            raise ValueError("the fluid model prices one colocate or partial step; async plans "
                             "are simulated")
        gen_end = self._colocate() if self.plan.mode is Mode.COLOCATE else self._partial()
        end = self._finish(gen_end)
        return FluidStep(end, self.work_end.get(Role.ROLLOUT, gen_end),
                         self.work_end.get(Role.GENRM, self.work_end.get(Role.ROLLOUT, gen_end)),
                         end - gen_end)

    def _colocate(self) -> float:
        plan, pool = self.plan, self.pool
        ro = self._role(Role.ROLLOUT, len(plan.placement(Role.ROLLOUT).devices))
        gr = self._role(Role.GENRM, len(plan.placement(Role.GENRM).devices)) if self.has_genrm else None
        now, r = 0.0, 0
        while True:
            items = self._members(pool.round_groups(r))
            self.rounds = r + 1
            for stage in self.sched.generate:
                if stage.phase in (Phase.ROLLOUT, Phase.GENRM) and (stage.phase is Phase.ROLLOUT
                                                                     or gr is not None):
                    role = Role.ROLLOUT if stage.phase is Phase.ROLLOUT else Role.GENRM
                    eng_r = ro if role is Role.ROLLOUT else gr
                    done = batch_times(eng_r, items, now)
                    (self.rollout_end if role is Role.ROLLOUT else self.genrm_end)[items] = done
                    self._busy_spans(role, np.arange(len(items)) % eng_r.engines,
                                     np.full(len(items), now), done, f"r{r}")
                    now = float(done.max()) if len(done) else now
                    self.work_end[role] = now
                else:
                    now = switch(plan, self.cost, stage, now, self.work_end, 0, self.spans)
            r += 1
            if not pool.round_groups(r).size:
                return now
            for stage in self.sched.between_rounds:
                now = switch(plan, self.cost, stage, now, self.work_end, 0, self.spans)

    def _partial(self) -> float:
        plan, pool = self.plan, self.pool
        busy = len(plan.placement(Role.ROLLOUT).devices)
        if self.has_genrm:
            busy += len(plan.placement(Role.GENRM).devices)
        ro = self._role(Role.ROLLOUT, busy)
        gr = self._role(Role.GENRM, busy) if self.has_genrm else None
        items = self._members(pool.round_groups(0))
        # rollout completion times on the rollout's own clock: it stops while the GenRM
        # queue holds it back (`JudgeStream` maps it to wall time)
        tau = batch_times(ro, items, 0.0)
        began = np.zeros(len(items))
        grid, least = least_loaded(tau, ro.engines)
        t_elig = 0.0
        stream = None
        judged = np.full(len(items), np.nan)
        by_tau = np.argsort(tau, kind="stable")    # arrival order, kept sorted across rounds
        for rnd in range(self.cap + 1):
            mine = pool.round[items] == rnd
            if gr is not None:
                # each pass judges every arrival so far; a round's own times come from the
                # pass that first sees it (later rounds add little load to its judging)
                stream = JudgeStream(gr, plan.experiment.engine.queue_capacity, items[by_tau],
                                 tau[by_tau], mine[by_tau])
                judged[by_tau[mine[by_tau]]] = stream.judged
            else:
                judged = tau
            res = self._resolved(items[mine], judged[mine])
            if rnd >= self.cap or not res:
                break
            t_elig = max(t_elig, max(res.values()))
            drops = sorted((t, g) for g, t in res.items() if pool.group_dropped[g])
            nxt = pool.round_groups(rnd + 1)[:len(drops)]
            if not len(nxt):
                break
            # each replacement group starts when a dropped group is resolved, in that
            # order; its requests join the least-loaded rollout engines
            launch = np.repeat([t for t, _ in drops[:len(nxt)]], pool.group_size[nxt])
            if stream is not None:
                launch = stream.rollout_clock(launch)
            new = self._members(nxt)
            done_new = self._replacements(ro, new, launch, grid, least)
            add = len(items) + np.argsort(done_new, kind="stable")
            merged = np.concatenate([by_tau, add])
            both = np.concatenate([tau, done_new])
            by_tau = merged[np.argsort(both[merged], kind="stable")]   # two sorted runs
            judged = np.concatenate([judged, np.full(len(new), np.nan)])
            items = np.concatenate([items, new])
            tau = np.concatenate([tau, done_new])
            began = np.concatenate([began, launch])
        wall = stream.wall(tau) if stream is not None else tau
        self.rollout_end[items] = wall
        if gr is not None:
            self.genrm_end[items] = judged
        self.rounds = int(pool.round[items].max()) + 1
        if self.tracing:
            start = stream.wall(began) if stream is not None else began
            self._partial_spans(items, start, wall, stream)
        self.work_end[Role.ROLLOUT] = max(float(wall.max()), t_elig)
        if gr is None:
            return self.work_end[Role.ROLLOUT]
        self.work_end[Role.GENRM] = float(judged.max())
        return max(self.work_end[Role.GENRM], self.work_end[Role.ROLLOUT])

    def _partial_spans(self, items: np.ndarray, start: np.ndarray, wall: np.ndarray,
                       stream: Optional[JudgeStream]) -> None:
        """Rollout: each engine busy until its dealt batch is done; a replacement request
        runs on the engine free first. GenRM: the pool's occupancy."""
        first = int((self.pool.round[items] == 0).sum())
        groups = self.plan.placement(Role.ROLLOUT).groups()
        E = len(groups)
        eng = np.arange(first) % E
        self._busy_spans(Role.ROLLOUT, eng, np.zeros(first), wall[:first], "")
        free = np.zeros(E)
        np.maximum.at(free, eng, wall[:first])
        heap = sorted((float(free[e]), e) for e in range(E))
        runs: dict[int, list[list[float]]] = {}     # per engine: merged busy intervals
        for i in (first + np.argsort(start[first:], kind="stable")).tolist():
            t_free, e = heappop(heap)
            a, b = float(start[i]), max(float(start[i]), float(wall[i]))
            iv = runs.setdefault(e, [])
            if iv and a <= iv[-1][1]:
                iv[-1][1] = max(iv[-1][1], b)
            else:
                iv.append([a, b])
            heappush(heap, (max(t_free, b), e))
        for e, iv in sorted(runs.items()):
            for a, b in iv:
                self.spans.append(SpanRecord(step=0, role=Role.ROLLOUT, phase=Phase.ROLLOUT,
                                             devices=tuple(groups[e]), start_s=a, end_s=b,
                                             name=f"rollout[{e}] replacements"))
        if stream is None:
            return
        groups = self.plan.placement(Role.GENRM).groups()
        busy = stream.busy_engines()
        T = stream.T
        for e in range(len(groups)):
            on = np.concatenate([[False], busy > e, [False]]).astype(np.int8)
            edges = np.flatnonzero(np.diff(on))
            for lo, hi in zip(edges[0::2].tolist(), edges[1::2].tolist()):
                self.spans.append(SpanRecord(step=0, role=Role.GENRM, phase=Phase.GENRM,
                                             devices=tuple(groups[e]), start_s=float(T[lo]),
                                             end_s=float(T[min(hi, len(T) - 1)]),
                                             name=f"genrm[{e}] (pool occupancy)"))

    def _replacements(self, ro: EngineRole, new: np.ndarray, launch: np.ndarray, grid: np.ndarray,
                      least: np.ndarray) -> np.ndarray:
        """When replacement requests launched at `launch` (rollout clock) finish: each joins
        the least-loaded engine, waits while that engine's batch is full, then decodes at its
        batch (plus itself) as the batch drains: the decode steps are the integral of the
        step rate over time."""
        ctx = float(np.mean(ro.inp[new] + ro.out[new] / 2.0))
        s1 = float(ro.table.time(np.array([1.0]), np.array([ctx]))[0])
        batch = least + 1.0
        rate = np.where(batch > ro.max_seqs, 0.0, 1.0 / ro.table.time(batch, np.full(len(grid), ctx)))
        steps = np.concatenate([[0.0], np.cumsum((rate[1:] + rate[:-1]) / 2 * np.diff(grid))])
        steps += np.arange(len(grid)) * 1e-9       # strictly increasing, for interpolation
        start = launch + ro.pj[new] + ro.call(1)
        # past the first batch's end an engine runs replacements only: batch one
        at = np.interp(start, grid, steps) + np.maximum(0.0, start - grid[-1]) / s1
        target = at + ro.out[new]
        return np.where(target <= steps[-1], np.interp(target, steps, grid),
                        grid[-1] + (target - steps[-1]) * s1)

    # ---- finish ------------------------------------------------------------------------
    def _finish(self, now: float) -> float:
        plan, cost = self.plan, self.cost
        spans = self.spans if self.tracing else []
        for stage in self.sched.finish:
            if stage.phase in (Phase.OFFLOAD, Phase.RELOAD):
                now = switch(plan, cost, stage, now, self.work_end, 0, spans)
            elif stage.phase is Phase.WEIGHT_SYNC:
                now = weight_sync(plan, cost, now, 0, spans)
            else:
                now = self._trainer_phase(stage.phase, now)
        return now

    def _snake(self, dp: int) -> tuple[np.ndarray, np.ndarray]:
        """Kept sequences (pool indices) and their DP rank, dealt in snake order of length:
        near-balanced loads."""
        pool = self.pool
        kept = np.flatnonzero(pool.kept)
        seq = pool.prompt_tokens + pool.response_tokens
        order = kept[np.argsort(-seq[kept], kind="stable")]
        pos = np.arange(len(order))
        lap, off = pos // dp, pos % dp
        return order, np.where(lap % 2 == 0, off, dp - 1 - off)

    def _trainer_phase(self, phase: Phase, now: float) -> float:
        """One trainer pass, timed by its slowest ranks: the `HEAVY` ranks with the most
        tokens under the snake split (cached per layout: it does not depend on the
        generation placement). A trace shows the pass as one span over the role's devices."""
        plan, pool = self.plan, self.pool
        role = Role.REFERENCE if phase is Phase.REF_LOGPROB else Role.TRAINER
        pl = plan.placement(role)
        key = (phase, role, pl.tp, pl.pp, pl.dp, plan.balance_cost)
        took = self.fm._trainer.get(key)
        if took is None:
            seq = pool.prompt_tokens + pool.response_tokens
            order, rank = self._snake(pl.dp)
            loads = np.bincount(rank, weights=seq[order], minlength=pl.dp)
            heavy = np.argsort(-loads, kind="stable")[:HEAVY]
            bins = [order[rank == k].tolist() for k in heavy.tolist()]
            sp = Split(bins, loads[heavy].tolist(), "snake")
            if phase is Phase.TRAIN:
                took = train_epochs(plan, self.cost, sp, seq, 0.0, 0, [])
            else:
                took = rank_phase(plan, self.cost, role, phase, bins, seq, 0.0, 0, [])
            self.fm._trainer[key] = took
        if self.tracing:
            name = {Phase.TRAIN: "train", Phase.REF_LOGPROB: "ref_logprob"}.get(phase, "old_logprob")
            self.spans.append(SpanRecord(step=0, role=role, phase=phase, devices=pl.devices,
                                         start_s=now, end_s=now + took,
                                         name=f"{name} (slowest rank)"))
        return now + took

    # ---- a trace -------------------------------------------------------------------------
    def as_trace(self, st: FluidStep, seed: int, with_samples: bool = True) -> Trace:
        from yatt.core import TraceMeta, TraceSource
        from yatt.core.version import yatt_version

        pool, plan = self.pool, self.plan
        n = pool.n
        dp_rank = np.full(n, -1, np.int64)
        order, rank = self._snake(plan.placement(Role.TRAINER).dp)
        dp_rank[order] = rank
        has_genrm = self.has_genrm

        def opt(x: np.ndarray) -> list:
            return [None if v != v else v for v in x.tolist()]
        zeros = [0] * n
        rows = zip([0] * n, pool.sample_id.tolist(), pool.prompt_id.tolist(),
                   pool.prompt_tokens.tolist(), pool.response_tokens.tolist(),
                   pool.genrm_in.tolist() if has_genrm else zeros,
                   pool.genrm_out.tolist() if has_genrm else zeros, pool.reward.tolist(),
                   pool.kept.tolist(), dp_rank.tolist(), pool.round.tolist(),
                   opt(self.rollout_end), opt(self.genrm_end), zeros)
        samples = sample_records(rows) if with_samples else []
        c = plan.cluster
        kept = pool.kept
        meta = TraceMeta(source=TraceSource.SIMULATED, plan=plan, seed=seed,
                         yatt_version=yatt_version(),
                         hardware=f"{c.nodes}x{c.gpus_per_node} {c.gpu.name}",
                         steps=1, extra={"cost_model": type(self.cost).__name__, "model": "fluid",
                                         "steps": [{"step": 0, "step_time_s": st.step_time,
                                                    "rounds": self.rounds,
                                                    "dropped_groups": int(pool.group_dropped.sum()),
                                                    "kept": int(kept.sum())}]})
        return Trace(meta, tuple(samples), tuple(self.spans))


def fluid_step(plan: Plan, workload: Workload, cost: CostModel, seed: int = 0,
               model: Optional[FluidModel] = None) -> FluidStep:
    """The fluid model's view of one step of `plan` (a FluidModel caches across calls)."""
    return (model or FluidModel(cost)).step(plan, workload, seed)
