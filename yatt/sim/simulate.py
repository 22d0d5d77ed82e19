"""`simulate(plan, workload, cost_model, seed)`: one SimPy run of RL steps -> Trace.

Why: this is the planner's oracle. It walks the step order of `yatt.core.schedule` for the
plan's mode, with generation engines as SimPy processes (`engine.py`), phase switches and
trainer phases costed by the injected cost model, and writes the same Trace schema the
executor records.

Full colocate runs each generation stage on every device in turn (rollout -> switch ->
GenRM), once per dynamic-sampling round. Partial colocate runs rollout and GenRM engines
at once on disjoint devices, joined by a bounded queue; a judged group that is dropped
immediately streams a replacement prompt back into the rollout engines. Each generator
releases its devices as soon as its own work is over (rollout: once no replacement can be
requested any more); the trainer reloads when both are released.
The cost model's `contention` slows each phase by the number of devices of the host it
keeps busy at once (CPU "devices" share cores; `contention.py`).

Async mode runs two processes joined by a queue of generated steps: the generators
(rollout, GenRM on the rollout's devices as in full colocate or on their own devices as in
partial) produce step after step, each with the newest published weights, and block when
`yatt.core.schedule.may_start_rollout` says they are `max_staleness` steps ahead; the
trainer trains each step as it arrives and publishes its weights. Weight sync is charged on
both sides (an NCCL broadcast occupies sender and receivers): the trainer after each train
step, the engines when they take a new version between their steps; the two are not forced
to coincide. A step's time is the time between consecutive train ends; the first step
(rollout and training in sequence: the pipeline's fill) is the warm-up, reported apart.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import simpy

from yatt.core import (CostModel, InputError, Phase, Plan, Role,
                       SampleRecord, SpanRecord, Trace, TraceMeta, TraceSource, Workload)
from yatt.core import limits
from yatt.core.roles import Mode
from yatt.core.schedule import (Stage, async_summary, gating_train_step, policy_version,
                                step_schedule)
from yatt.core.version import yatt_version

from .contention import engine_cost
from .engine import GenEngine, Router
from .handoffs import publish_weights, switch, take_weights, weight_sync
from .pool import StepPool, sample_records, step_pool
from .trainer import rank_phase, split, train_epochs


def simulate(plan: Plan, workload: Workload, cost_model: CostModel, seed: int, steps: int = 1,
             *, recorded: Optional[Sequence[SampleRecord]] = None) -> Trace:
    """Simulate `steps` RL steps of `plan` on `workload`.

    recorded: samples of a trace to replay; for each step they cover, lengths, rounds and
    kept flags come from them instead of the seeded rng.

    Trace.meta.extra holds, per step: "balance" (trainer DP split: policy, max and mean
    load in balance-cost units and max/mean), "dropped_groups", "rounds", "step_time_s".
    Async plans add, per step, "policy_version" and the generator's and trainer's times
    ("gen_start_s", "gen_end_s", "train_start_s", "train_end_s", "gen_blocked_s": waiting on
    the queue bound, "train_waiting_s": the trainer waiting for samples), and "async": the
    warm-up (`warmup_steps`, `warmup_s`), the steady-state step time `steady_step_s` (mean
    over the steps after warm-up, None when there are none) and `max_staleness`.
    """
    if steps < 0:
        raise InputError(f"got {steps}; allowed: >= 0", field="steps")
    # metered against the command's work budget (no-op outside `limits.work_budget`)
    limits.charge(limits.sim_requests(workload.expected_requests if recorded is None
                                      else len(recorded) / max(1, steps),
                                      plan.cluster.num_gpus, steps))
    by_step: Optional[dict[int, list[SampleRecord]]] = None
    if recorded is not None:
        by_step = {}
        for s in recorded:
            by_step.setdefault(s.step, []).append(s)
    run = _Run(plan, workload, cost_model, seed, by_step)
    env = simpy.Environment()
    env.process(run.all_steps(env, steps))
    env.run()
    c = plan.cluster
    meta = TraceMeta(source=TraceSource.SIMULATED, plan=plan, seed=seed, yatt_version=yatt_version(),
                     hardware=f"{c.nodes}x{c.gpus_per_node} {c.gpu.name}", steps=steps,
                     extra={"cost_model": type(cost_model).__name__, "steps": run.extra,
                            **({"async": async_summary(run.extra, plan.max_staleness)}
                               if plan.mode is Mode.ASYNC else {})})
    return Trace(meta, tuple(run.samples), tuple(run.spans))


class _Run:
    """State of one simulation: plan facts resolved once, records collected as it runs."""

    def __init__(self, plan: Plan, w: Workload, cost: CostModel, seed: int,
                 recorded: Optional[dict[int, list[SampleRecord]]]) -> None:
        self.plan, self.w, self.cost, self.seed, self.recorded = plan, w, cost, seed, recorded
        algo = plan.experiment.algo
        self.has_genrm = algo.reward.needs_genrm and plan.has(Role.GENRM)
        self.sched = step_schedule(plan.mode, genrm=self.has_genrm,
                                   reference=algo.use_reference and plan.has(Role.REFERENCE),
                                   old_logprobs=algo.old_logprobs,
                                   genrm_shared=plan.genrm_shares_rollout)
        eng = plan.experiment.engine
        self.kv = {Role.ROLLOUT: self._kv(Role.ROLLOUT, eng.gpu_memory_utilization)}
        self.max_seqs = {Role.ROLLOUT: eng.max_num_seqs, Role.GENRM: eng.genrm_max_num_seqs}
        if self.has_genrm:
            self.kv[Role.GENRM] = self._kv(Role.GENRM, eng.gpu_memory_utilization)
        self.samples: list[SampleRecord] = []
        self.spans: list[SpanRecord] = []
        self.extra: list[dict] = []
        self._pf_memo: dict[tuple[Role, bool], dict[int, float]] = {}

    def _kv(self, role: Role, util: float) -> int:
        pl = self.plan.placement(role)
        model = self.plan.model_for(role)
        kv = int(self.cost.kv_capacity_tokens(model, pl.tp, util))
        if kv <= 0:
            raise InputError(f"{model.name} does not fit on {pl.tp} x {self.plan.cluster.gpu.name} "
                             f"for {role.value} (no KV capacity left); allowed: a larger TP",
                             field=f"placements.{role.value}.tp")
        return kv

    def prefill_times(self, role: Role, tokens: list[int], join: bool = False) -> list[float]:
        """Per-request prefill times (`join`: into a decoding batch), one cost-model call
        per distinct length (memoized)."""
        pl = self.plan.placement(role)
        model, tp = self.plan.model_for(role), pl.tp
        fn = self.cost.prefill_join_time if join else self.cost.prefill_time
        memo = self._pf_memo.setdefault((role, join), {})
        lengths, where = np.unique(np.asarray(tokens, np.int64), return_inverse=True)
        for x in lengths.tolist():
            if x not in memo:
                memo[x] = fn(model, tp, x)
        return np.array([memo[x] for x in lengths.tolist()], float)[where].tolist()

    # ---- the step loop ----------------------------------------------------------------------
    def all_steps(self, env: simpy.Environment, steps: int):
        if self.sched.overlapped:
            yield from self.async_steps(env, steps)
            return
        for k in range(steps):
            st = _Step(self, step_pool(self.w, k, self.seed, self.recorded), env.now)
            if self.plan.mode is Mode.COLOCATE:
                yield from st.generate_colocate(env)
            else:
                yield from st.generate_partial(env)
            yield from st.finish(env)
            st.emit(env.now)

    def async_steps(self, env: simpy.Environment, steps: int):
        """Generators and trainer as two processes joined by a queue of generated steps."""
        k = self.plan.max_staleness
        trained_ev = [env.event() for _ in range(steps)]
        queue: simpy.Store = simpy.Store(env)
        state = {"trained": 0, "engine_version": 0, "train_end": 0.0}
        serial = not self.has_genrm or self.plan.genrm_shares_rollout

        def generator():
            for s in range(steps):
                t_ready = env.now
                j = gating_train_step(s, k)
                if j >= 0 and not trained_ev[j].processed:
                    yield trained_ev[j]
                blocked = env.now - t_ready
                if state["trained"] > state["engine_version"]:
                    end = take_weights(self.plan, self.cost, env.now, s, self.spans)
                    yield env.timeout(end - env.now)
                    state["engine_version"] = state["trained"]
                st = _Step(self, step_pool(self.w, s, self.seed, self.recorded), env.now)
                st.version = policy_version(s, state["engine_version"], k)
                st.timing = {"gen_start_s": st.t0, "gen_blocked_s": blocked}
                if serial:
                    yield from st.generate_colocate(env)
                else:
                    yield from st.generate_partial(env)
                st.timing["gen_end_s"] = env.now
                yield queue.put(st)   # the samples are ready; the engines switch back after
                for stage in self.sched.refill:
                    yield env.timeout(max(0.0, st._switch(stage, env.now) - env.now))

        def trainer():
            for s in range(steps):
                st = yield queue.get()
                t = env.now
                st.timing["train_start_s"] = t
                st.timing["train_waiting_s"] = t - state["train_end"]
                yield from st.finish(env)
                st.timing["train_end_s"] = env.now
                st.t0 = state["train_end"]  # a step's time: from the previous train end
                state["train_end"] = env.now
                state["trained"] = s + 1
                trained_ev[s].succeed()
                st.emit(env.now)

        gen = env.process(generator())
        tr = env.process(trainer())
        yield env.all_of([gen, tr])


class _Step:
    """One step's bookkeeping: which samples are generated, judged, kept and where."""

    def __init__(self, run: _Run, pool: StepPool, t0: float) -> None:
        self.run, self.pool, self.t0 = run, pool, t0
        self.plan, self.cost, self.step = run.plan, run.cost, pool.step
        n = pool.n
        self.rollout_end: list[Optional[float]] = [None] * n
        self.genrm_end: list[Optional[float]] = [None] * n
        self.dp_rank = [-1] * n
        self.group_of = np.repeat(np.arange(pool.groups), pool.group_size).tolist()
        self.left = pool.group_size.tolist()
        self.dropped = pool.group_dropped.tolist()
        self.g_round = pool.group_round.tolist()
        self.cap = int(pool.group_round.max()) if pool.groups else 0
        self.prompt = pool.prompt_tokens.tolist()
        self.resp = pool.response_tokens.tolist()
        self.gin = pool.genrm_in.tolist()
        self.gout = pool.genrm_out.tolist()
        self.work_end: dict[Role, float] = {}
        self.rounds = 0
        self.version = pool.step      # on-policy: step s is generated by version s
        self.timing: dict[str, float] = {}  # async: the generator's and trainer's times

    # ---- engines ----------------------------------------------------------------------------
    def _engines(self, env, role: Role, on_done, capacity: Optional[int] = None,
                 busy: int = 1, streamed: bool = False) -> Router:
        """The role's engines; `busy`: devices generating at once on the host (contention);
        `streamed`: fed by hand-offs, each engine taking what piled up as one call."""
        plan = self.plan
        pl, model = plan.placement(role), plan.model_for(role)
        inp, out = (self.prompt, self.resp) if role is Role.ROLLOUT else (self.gin, self.gout)
        phase = Phase.ROLLOUT if role is Role.ROLLOUT else Phase.GENRM
        pf = self.run.prefill_times(role, inp)
        pj = self.run.prefill_times(role, inp, join=True)
        cost = engine_cost(self.cost, phase, busy, model)
        k = cost.factor if cost is not self.cost else 1.0
        if k != 1.0:
            pf = [k * x for x in pf]
            pj = [k * x for x in pj]
        base = self.cost
        # a call's overhead is CPU work of the engine's process: contended like its steps

        def call(n: int) -> float:
            return k * base.engine_call_time(model, n)
        engines = [GenEngine(env, tuple(g), model, pl.tp, cost, self.run.kv[role],
                             self.run.max_seqs[role], inp, out, pf, on_done, join_s=pj,
                             call_s=call, merged_calls=streamed)
                   for g in pl.groups()]
        return Router(env, engines, capacity)

    def _engine_spans(self, router: Router, role: Role, label: str) -> None:
        phase = Phase.ROLLOUT if role is Role.ROLLOUT else Phase.GENRM
        for k, e in enumerate(router.engines):
            for a, b, tok in e.busy:
                self.run.spans.append(SpanRecord(step=self.step, role=role, phase=phase,
                                                 devices=e.devices, start_s=a, end_s=b, tokens=tok,
                                                 name=f"{role.value}[{k}] {label}"))
                self.work_end[role] = max(self.work_end.get(role, 0.0), b)

    def _judged(self, done, t: float) -> None:
        left, group_of = self.left, self.group_of
        for i in done:
            g = group_of[i]
            left[g] -= 1
            if left[g] == 0:
                self._resolved(g, t)

    def _resolved(self, g: int, t: float) -> None:  # overridden per mode by assignment
        pass

    def _members(self, groups) -> list[int]:
        out: list[int] = []
        for g in groups:
            out.extend(self.pool.members(int(g)))
        return out

    # ---- full colocate ----------------------------------------------------------------------
    def generate_colocate(self, env):
        sched, pool = self.run.sched, self.pool
        r = 0
        while True:
            items = self._members(pool.round_groups(r))
            self.rounds = r + 1
            for stage in sched.generate:
                if stage.phase is Phase.ROLLOUT:
                    yield from self._gen_round(env, Role.ROLLOUT, items, f"r{r}")
                elif stage.phase is Phase.GENRM:
                    yield from self._gen_round(env, Role.GENRM, items, f"r{r}")
                else:
                    yield env.timeout(self._switch(stage, env.now) - env.now)
            r += 1
            if not pool.round_groups(r).size:
                return
            for stage in sched.between_rounds:
                yield env.timeout(self._switch(stage, env.now) - env.now)

    def _gen_round(self, env, role: Role, items: list[int], label: str):
        last = role is Role.GENRM or not self.run.has_genrm
        ends = self.genrm_end if role is Role.GENRM else self.rollout_end

        def on_done(_e, done, t):
            for i in done:
                ends[i] = t
            if last:
                self._judged(done, t)
            return None

        router = self._engines(env, role, on_done, busy=len(self.plan.placement(role).devices))
        router.submit_all(items)
        router.close()
        yield env.all_of(router.procs())
        self._engine_spans(router, role, label)

    # ---- partial colocate -------------------------------------------------------------------
    def generate_partial(self, env):
        pool = self.pool
        has_genrm = self.run.has_genrm
        queue = self.plan.experiment.engine.queue_capacity
        next_round = {r: list(pool.round_groups(r)) for r in range(1, self.cap + 1)}
        state = {"eligible": 0, "t_elig": env.now}
        rollout_end = self.rollout_end

        def launch(groups) -> None:
            for g in groups:
                if self.g_round[g] < self.cap:
                    state["eligible"] += 1
            items = self._members(groups)
            if env.now == self.t0:
                ro.submit_all(items)
            else:
                ro.submit(items)

        def maybe_close() -> None:
            if state["eligible"] == 0:
                leftovers = [g for r in sorted(next_round) for g in next_round[r]]
                next_round.clear()
                if leftovers:  # a replayed trace with more replacements than drops
                    launch(leftovers)
                    if state["eligible"]:
                        return
                ro.close()

        def resolved(g: int, t: float) -> None:
            r = self.g_round[g]
            self.rounds = max(self.rounds, r + 1)
            if r < self.cap:
                state["eligible"] -= 1
                state["t_elig"] = t
                if self.dropped[g] and next_round.get(r + 1):
                    launch([next_round[r + 1].pop(0)])
            maybe_close()

        self._resolved = resolved

        handoff = self.cost.stream_handoff_time

        def rollout_done(_e, done, t):
            for i in done:
                rollout_end[i] = t
            if has_genrm:
                hold = gr.submit(done)
                if hold is None and (dt := handoff(len(done))) > 0:
                    return env.timeout(dt)
                return hold
            self._judged(done, t)
            return None

        def genrm_done(_e, done, t):
            for i in done:
                self.genrm_end[i] = t
            self._judged(done, t)
            return None

        busy = len(self.plan.placement(Role.ROLLOUT).devices)
        if has_genrm:  # rollout and GenRM engines generate at once on disjoint devices
            busy += len(self.plan.placement(Role.GENRM).devices)
        ro = self._engines(env, Role.ROLLOUT, rollout_done, busy=busy)
        gr = (self._engines(env, Role.GENRM, genrm_done, queue, busy, streamed=True)
              if has_genrm else None)
        launch(list(pool.round_groups(0)))
        maybe_close()
        yield env.all_of(ro.procs())
        self._engine_spans(ro, Role.ROLLOUT, "")
        self.work_end[Role.ROLLOUT] = max(self.work_end.get(Role.ROLLOUT, self.t0), state["t_elig"])
        if gr is not None:
            gr.close()
            yield env.all_of(gr.procs())
            self._engine_spans(gr, Role.GENRM, "")

    # ---- switches and the trainer -----------------------------------------------------------
    def _switch(self, stage: Stage, now: float) -> float:
        return switch(self.plan, self.cost, stage, now, self.work_end, self.step, self.run.spans)

    def _weight_sync(self, now: float) -> float:
        if self.plan.mode is Mode.ASYNC:
            return publish_weights(self.plan, self.cost, now, self.step, self.run.spans)
        return weight_sync(self.plan, self.cost, now, self.step, self.run.spans)

    def finish(self, env):
        pool, plan = self.pool, self.plan
        kept = np.flatnonzero(pool.kept)
        seq = pool.prompt_tokens + pool.response_tokens
        tr_dp = plan.placement(Role.TRAINER).dp
        sp = split(plan, seq[kept], kept, tr_dp)
        for r, members in enumerate(sp.bins):
            for i in members:
                self.dp_rank[i] = r
        self.balance = {"policy": sp.policy, "max_load": max(sp.loads, default=0.0),
                        "mean_load": sum(sp.loads) / max(1, len(sp.loads)),
                        "max_over_mean": sp.max_over_mean}
        for stage in self.run.sched.finish:
            now = env.now
            if stage.phase is Phase.REF_LOGPROB:
                ref_dp = plan.placement(Role.REFERENCE).dp
                rsp = sp if ref_dp == tr_dp else split(plan, seq[kept], kept, ref_dp)
                end = rank_phase(plan, self.cost, Role.REFERENCE, Phase.REF_LOGPROB, rsp.bins, seq,
                                 now, self.step, self.run.spans, name="ref_logprob")
            elif stage.phase is Phase.OLD_LOGPROB:  # the trainer's forward over its own share
                end = rank_phase(plan, self.cost, Role.TRAINER, Phase.OLD_LOGPROB, sp.bins, seq,
                                 now, self.step, self.run.spans, name="old_logprob")
            elif stage.phase is Phase.TRAIN:
                end = train_epochs(plan, self.cost, sp, seq, now, self.step, self.run.spans)
            elif stage.phase is Phase.WEIGHT_SYNC:
                end = self._weight_sync(now)
            else:
                end = self._switch(stage, now)
            yield env.timeout(max(0.0, end - now))

    def emit(self, t_end: float) -> None:
        pool = self.pool
        kept = pool.kept.tolist()
        sid, pid, rnd = pool.sample_id.tolist(), pool.prompt_id.tolist(), pool.round.tolist()
        reward = pool.reward.tolist()
        has_genrm = self.run.has_genrm
        zeros = [0] * pool.n
        gin, gout = (self.gin, self.gout) if has_genrm else (zeros, zeros)
        step = [self.step] * pool.n
        # the records' fields in declaration order, built without the frozen dataclass's
        # per-field __setattr__ (a step can hold hundreds of thousands of samples)
        rows = zip(step, sid, pid, self.prompt, self.resp, gin, gout, reward, kept,
                   self.dp_rank, rnd, self.rollout_end, self.genrm_end, [self.version] * pool.n)
        self.run.samples.extend(sample_records(rows))
        self.run.extra.append({
            "step": self.step, "step_time_s": t_end - self.t0, "rounds": self.rounds,
            "dropped_groups": int(pool.group_dropped.sum()), "balance": self.balance,
            **({"policy_version": self.version, **self.timing} if self.timing else {})})
