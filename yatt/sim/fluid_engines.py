"""The fluid model's engine pieces: a decode step table interpolated over batch and
context, a generating role's per-sample costs, batch dispatch (completion times of requests
handed to idle engines at once), and streamed judging in the mean field.

Why apart from `fluid`: these are the vectorised cost arithmetic of engines; `fluid`
composes them into a step (dispatch order, dynamic sampling, the finish phases, a trace).
"""
from __future__ import annotations

from dataclasses import dataclass
from heapq import heappop, heappush

import numpy as np

from yatt.core import CostModel, Phase, Role, SpanRecord

CTX_POINTS = 48     # per-sequence contexts in a step table
GRID = 1000         # time points of the streamed-judging integration


class StepTable:
    """`decode_step_time(model, tp, B, ctx)` tabulated for B = 1..bmax on a geometric grid of
    per-sequence contexts; `time(B, ctx)` interpolates (vectorised)."""

    def __init__(self, cost: CostModel, model, tp: int, bmax: int, cmax: float) -> None:
        self.bmax = max(1, bmax)
        self.ctx = np.geomspace(1.0, max(2.0, cmax), CTX_POINTS)
        self.tab = np.array([[cost.decode_step_time(model, tp, b, c) for c in self.ctx]
                             for b in range(1, self.bmax + 1)])
        self._lc = np.log(self.ctx)

    def time(self, batch: np.ndarray, ctx: np.ndarray) -> np.ndarray:
        """Step seconds at (fractional) batch `batch` >= 1 and mean context `ctx` per sequence."""
        b = np.clip(np.asarray(batch, float), 1.0, self.bmax)
        x = np.interp(np.log(np.maximum(np.asarray(ctx, float), 1.0)), self._lc,
                      np.arange(CTX_POINTS, dtype=float))
        i = np.minimum(x.astype(np.int64), CTX_POINTS - 2)
        fx = x - i
        lo = np.minimum(b.astype(np.int64), self.bmax) - 1
        hi = np.minimum(lo + 1, self.bmax - 1)
        fb = b - (lo + 1)
        t = self.tab

        def at(row: np.ndarray) -> np.ndarray:
            return t[row, i] * (1 - fx) + t[row, i + 1] * fx
        return at(lo) * (1 - fb) + at(hi) * fb


@dataclass
class EngineRole:
    """One generating role's engines: what a batch of requests costs on them."""

    engines: int
    tp: int
    kv: int
    max_seqs: int
    inp: np.ndarray       # per pool sample: input tokens for this role
    out: np.ndarray       # decode steps (>= 1)
    pf: np.ndarray        # prefill on an idle engine
    pj: np.ndarray        # prefill joining a decoding batch
    call: object          # requests -> seconds of an engine call
    table: StepTable
    rank: np.ndarray      # per pool sample: its place in (finish step, index) order


class JudgeStream:
    """Streamed judging (partial colocate) in the mean field: the GenRM engines share the
    arrivals, each holding the pool's mean batch. Integrated on a time grid:

    - arrivals come from the rollout's schedule on its own clock, which stops while the
      requests waiting for a GenRM slot exceed the queue capacity (the router holds the
      rollout engines back);
    - a waiting request is admitted while the pool has a free slot (max_num_seqs per
      engine) and owes its prefill, priority work drained at the pool's rate, first come
      first served;
    - after its prefill a request decodes its verdict at the step rate of the mean batch.

    Per-request times are read back from the integrated curves (arrivals, admissions,
    prefill done, decode steps), which are monotone.
    """

    def __init__(self, r: EngineRole, queue_cap: int, it: np.ndarray, taus: np.ndarray,
                 want: np.ndarray) -> None:
        """`it`, `taus`: requests and their arrival on the rollout's clock, in arrival
        order; `judged` holds the judgement times of those where `want`, in that order."""
        n, E = len(it), r.engines
        work = (r.pj[it] + r.call(1)) / E
        S = np.cumsum(work)
        steps = r.out[it].astype(float)
        ctx = float(np.mean(r.inp[it] + steps / 2.0)) if n else 1.0
        tab = r.table
        per_b = tab.time(np.arange(1, tab.bmax + 1, dtype=float), np.full(tab.bmax, ctx))
        slots = E * r.max_seqs
        horizon = (float(taus[-1]) if n else 0.0) + float(S[-1] if n else 0.0) \
            + (float(steps.max()) if n else 0.0) * float(per_b[-1]) + 1.0
        dt = horizon / GRID
        limit = 50 * GRID
        # decode steps the pool can take: at most one per fastest step over the horizon,
        # times the grid's extensions, plus the longest verdict
        due = np.zeros(int(50 * horizon / float(per_b[0])) + int(steps.max() if n else 0) + 16)
        top = len(due) - 1
        # the rollout's clock only moves in whole grid steps: arrivals by each of them
        arrived_by = np.searchsorted(taus, np.arange(limit + 1) * dt, side="right").tolist()
        S_l = S * (1 - 1e-9)                       # prefill sums round differently in the loop
        t = v = pd = backlog = 0.0
        ticks = arrived = admitted = entered = 0
        waiting = in_batch = 0
        T, TAU, V, PD, ADM, BUSY = [0.0], [0.0], [0.0], [0.0], [0.0], [0.0]
        done = 0
        while done < n and len(T) < limit:
            # arrivals: the rollout runs unless the waiting queue is over capacity
            if waiting < queue_cap:
                ticks += 1
                k = arrived_by[ticks]
                waiting += k - arrived
                arrived = k
            # admissions into free slots; each owes its prefill
            adm = min(waiting, slots - in_batch)
            if adm > 0:
                waiting -= adm
                in_batch += adm
                backlog += float(S[admitted + adm - 1] - (S[admitted - 1] if admitted else 0.0))
                admitted += adm
            pre = min(backlog, dt)
            backlog -= pre
            pd += pre
            # requests whose prefill is done start decoding their verdicts
            k = min(int(S_l.searchsorted(pd, side="right")), admitted)
            if k > entered:
                tg = v + steps[entered:k]
                np.add.at(due, np.minimum(np.ceil(tg).astype(np.int64), top), 1.0)
                entered = k
            b = min(tab.bmax, max(1, int(round(in_batch / E))))
            v_new = v + (dt - pre) / float(per_b[b - 1])
            i0, i1 = int(v) + 1, min(int(v_new), top)
            if i1 >= i0:
                c = int(round(float(due[i0:i1 + 1].sum())))
                done += c
                in_batch -= c
            v = v_new
            t += dt
            T.append(t)
            TAU.append(ticks * dt)
            V.append(v)
            PD.append(pd)
            ADM.append(float(admitted))
            BUSY.append(float(E) if backlog > 0 else float(in_batch))
        ramp = np.arange(len(T)) * 1e-9          # strictly increasing, for interpolation
        self.T, self.TAU = np.array(T), np.array(TAU) + ramp
        self._busy = np.minimum(np.ceil(np.array(BUSY)), E)
        Vg, PDg, ADMg = np.array(V) + ramp, np.array(PD) + ramp, np.array(ADM) + ramp
        sel = np.flatnonzero(want)
        arrive = self.wall(taus[sel])
        admit = np.maximum(np.interp(sel + 1.0, ADMg, self.T), arrive)
        p_end = np.maximum(np.interp(S[sel], PDg, self.T), admit)
        target = np.interp(p_end, self.T, Vg) + steps[sel]
        self.judged = np.maximum(np.interp(target, Vg, self.T), p_end)

    def busy_engines(self) -> np.ndarray:
        """Engines with work at each grid time: all while prefill is owed, else one per
        running request up to all of them."""
        return self._busy

    def wall(self, tau: np.ndarray) -> np.ndarray:
        """Wall time at which the rollout's own clock reads `tau`."""
        return np.interp(tau, self.TAU, self.T)

    def rollout_clock(self, t: np.ndarray) -> np.ndarray:
        """The rollout's own clock at wall time `t`."""
        return np.interp(t, self.T, self.TAU)


def batch_times(r: EngineRole, items: np.ndarray, t0: float) -> np.ndarray:
    """Completion times of `items` handed to idle engines at t0 in one call each
    (round robin from engine 0, as `Router.submit_all` deals them)."""
    n = len(items)
    done = np.empty(n)
    if n == 0:
        return done
    eng = np.arange(n) % r.engines
    counts = np.bincount(eng, minlength=r.engines)
    need = np.bincount(eng, weights=r.inp[items] + r.out[items], minlength=r.engines)
    loop = (counts > r.max_seqs) | ((need > r.kv) & (counts > 1))
    fits = ~loop[eng]
    if fits.any():
        done[fits] = _batch_fit(r, items[fits], eng[fits], counts, t0)
    for e in np.flatnonzero(loop):
        mine = np.flatnonzero(eng == e)
        done[mine] = _batch_loop(r, items[mine], t0)
    return done


def _batch_fit(r: EngineRole, items: np.ndarray, eng: np.ndarray, counts: np.ndarray,
               t0: float) -> np.ndarray:
    """Engines whose whole batch is admitted at once: one decode interval per distinct
    finish step, vectorised over every engine."""
    f, inp = r.out[items], r.inp[items]
    counts = np.bincount(eng, minlength=len(counts))     # these engines' requests only
    # by engine, then finish step, then index: the items in (finish step, index) order,
    # then a stable sort by engine (a radix sort for 16-bit engine numbers)
    by_rank = np.argsort(r.rank[items])                      # distinct ranks: no ties
    kind = np.int16 if len(counts) < 2 ** 15 else np.int64
    order = by_rank[np.argsort(eng[by_rank].astype(kind), kind="stable")]
    e_s, f_s, in_s = eng[order], f[order], inp[order]
    n = len(items)
    idx = np.arange(n)
    start = np.zeros(len(counts), np.int64)
    np.cumsum(counts[:-1], out=start[1:])
    new = np.ones(n, bool)
    new[1:] = (e_s[1:] != e_s[:-1]) | (f_s[1:] != f_s[:-1])
    first = np.maximum.accumulate(np.where(new, idx, 0))
    seg0 = start[e_s]
    left = counts[e_s] - (first - seg0)                    # batch of this interval
    has_prev = first > seg0
    prev_f = np.where(has_prev, f_s[np.maximum(first - 1, 0)], 0)
    steps = f_s - prev_f
    csum = np.cumsum(in_s)
    done_in = np.where(has_prev, csum[np.maximum(first - 1, 0)] - (csum[seg0] - in_s[seg0]), 0)
    total_in = np.bincount(e_s, weights=in_s, minlength=len(counts))[e_s]
    ctx = (total_in - done_in) / left + prev_f + (steps - 1) / 2.0
    dt = np.where(new, r.table.time(left, ctx) * steps, 0.0)
    cum = np.cumsum(dt)
    cum -= (cum[seg0] - dt[seg0])                          # per engine from its start
    owed = np.bincount(eng, weights=r.pf[items], minlength=len(counts))
    calls = np.array([r.call(int(c)) if c else 0.0 for c in counts])
    out = np.empty(n)
    out[order] = t0 + (owed + calls)[e_s] + cum
    return out

def _batch_loop(r: EngineRole, items: np.ndarray, t0: float) -> np.ndarray:
    """One engine's continuous batching when its requests do not all fit at once."""
    t = t0 + r.call(len(items))
    waiting = list(items.tolist())[::-1]
    heap: list[tuple[int, int, int]] = []
    S = base = kv = 0
    done: dict[int, float] = {}
    while waiting or heap:
        debt = 0.0
        pfs = r.pj if heap else r.pf
        while waiting and len(heap) < r.max_seqs:
            i = waiting[-1]
            need = int(r.inp[i] + r.out[i])
            if heap and kv + need > r.kv:
                break
            waiting.pop()
            kv += need
            base += int(r.inp[i]) - S
            heappush(heap, (S + int(r.out[i]), i, int(r.inp[i]) - S))
            debt += pfs[i]
        B = len(heap)
        steps = heap[0][0] - S
        ctx = (base + B * S) / B + (steps - 1) / 2.0
        t += debt + float(r.table.time(np.array([B]), np.array([ctx]))[0]) * steps
        S += steps
        while heap and heap[0][0] == S:
            _, i, off = heappop(heap)
            base -= off
            kv -= int(r.inp[i] + r.out[i])
            done[i] = t
    return np.array([done[i] for i in items.tolist()])


def least_loaded(done: np.ndarray, engines: int) -> tuple[np.ndarray, np.ndarray]:
    """Requests the least-loaded rollout engine still runs, over time, after a batch
    dealt round robin (`done`: completion time per request, in dealing order)."""
    eng = np.arange(len(done)) % engines
    grid = np.linspace(0.0, float(done.max()) if len(done) else 1.0, 256)
    at = np.minimum(np.searchsorted(grid, done, side="left"), len(grid) - 1)
    per = np.bincount(eng * len(grid) + at, minlength=engines * len(grid))
    per = per.reshape(engines, len(grid))
    left = np.bincount(eng, minlength=engines)[:, None] - np.cumsum(per, axis=1)
    return grid, left.min(axis=0)


def busy_spans(role: Role, groups: list, eng: np.ndarray, start: np.ndarray,
               end: np.ndarray, label: str) -> list[SpanRecord]:
    """One span per engine of `groups`: from its first request's start to its last one's end."""
    phase = Phase.ROLLOUT if role is Role.ROLLOUT else Phase.GENRM
    E = len(groups)
    lo = np.full(E, np.inf)
    hi = np.full(E, -np.inf)
    np.minimum.at(lo, eng, start)
    np.maximum.at(hi, eng, end)
    return [SpanRecord(step=0, role=role, phase=phase, devices=tuple(groups[e]),
                       start_s=float(lo[e]), end_s=float(hi[e]),
                       name=f"{role.value}[{e}] {label}".rstrip())
            for e in np.flatnonzero(hi > lo).tolist()]
