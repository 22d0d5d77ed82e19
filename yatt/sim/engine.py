"""A generation engine (rollout or GenRM) with continuous batching, driven by SimPy events.

Why: generation dominates an RLHF step, and its time depends on how requests share the
running batch. The engine is simulated at request-completion granularity: between two
completions the batch is fixed, so the time to the next completion is one closed-form
`cost.decode_time` call and one SimPy timeout -- never an event per token.

Admission (vLLM-like, FCFS): a waiting request joins the running batch while the batch is
under `max_seqs` and its final KV footprint (input + output tokens) still fits in the
engine's KV capacity. Reserving the final footprint means no preemption is modelled; an
engine with an empty batch always admits one request (a request longer than the KV
capacity is not refused). Each admitted request's prefill (`cost.prefill_time` per
request, since attention cost is per sequence) is paid at the start of the next decode
interval, before its decode steps. A request admitted while others are decoding pays its
`join_s` instead (a mixed prefill+decode step; `CostModel.prefill_join_time`), when one
is given.
Each request then needs `max(1, output)` decode steps.

An arrival that finds room while the engine is decoding joins at the next decode-step
boundary, as a real engine's scheduler only changes the batch between steps: the interval
is cut after the first whole step that ends at or after the arrival (or runs to its end if
that is its last step). While prefill is still owed, the newcomer joins at once.

A call that hands an engine k requests at once (a batch, or one streamed hand-off) can
cost the engine's process time beyond its steps: the call itself, building and adding k
requests, returning results (`call_s(k)`, `CostModel.engine_call_time`). It is owed like
prefill, before the engine's next steps. A streamed GenRM (`merged_calls`) takes every
hand-off that arrived while it stepped as one call (the executor's `StreamQueue.get_all`):
its requests are billed as one `call_s(k)` when the engine next re-plans.
"""
from __future__ import annotations

from collections import deque
from functools import partial
from heapq import heapify, heappop, heappush, heapreplace
from math import ceil
from typing import Callable, Optional, Sequence

import simpy
from simpy.events import URGENT, Event

from yatt.core import CostModel, ModelSpec

# on_done(engine, finished sample indices, now) -> an event to wait on (backpressure) or None
DoneFn = Callable[["GenEngine", list, float], Optional[simpy.Event]]


class GenEngine:
    """One TP group serving requests. Per-sample data are plain lists indexed by sample:
    input and output tokens, and the prefill time of each request alone
    (`cost.prefill_time` per request, since attention cost is per sequence)."""

    def __init__(self, env: simpy.Environment, devices: tuple[int, ...], model: ModelSpec, tp: int,
                 cost: CostModel, kv_cap: int, max_seqs: int, in_tokens: Sequence[int],
                 out_tokens: Sequence[int], prefill_s: Sequence[float], on_done: DoneFn,
                 on_admit: Optional[Callable[[int], None]] = None,
                 join_s: Optional[Sequence[float]] = None,
                 call_s: Optional[Callable[[int], float]] = None,
                 merged_calls: bool = False) -> None:
        self.env, self.devices, self.model, self.tp, self.cost = env, devices, model, tp, cost
        self.kv_cap, self.max_seqs = kv_cap, max_seqs
        self.inp, self.out, self.pf = in_tokens, out_tokens, prefill_s
        self.pj = prefill_s if join_s is None else join_s
        self.on_done, self.on_admit = on_done, on_admit
        self.call_s = call_s
        self.merged_calls = merged_calls
        self.unbilled = 0     # requests handed over since the last merged call was billed
        self.on_drop: Optional[Callable[["GenEngine"], None]] = None  # outstanding went down
        self.router_index = 0
        self.waiting: deque[int] = deque()
        self.heap: list[tuple[int, int, int]] = []  # (finish step, sample, ctx offset)
        self.S = 0            # decode steps this engine has run
        self.base = 0         # sum over running of (input tokens - admission step)
        self.kv_used = 0
        self.outstanding = 0  # waiting + running (least-loaded dispatch key)
        self.closed = False
        self.decoding = False
        self.debt = 0.0       # prefill time still owed by admitted requests
        self.wake: Optional[simpy.Event] = None
        self.busy: list[tuple[float, float, int]] = []  # (start, end, tokens) intervals
        self._busy_from: Optional[float] = None
        self._tokens = 0
        self.decode = partial(cost.decode_time, model, tp)  # (batch, context sum, steps) -> s
        self._interval: tuple[float, float, float, int, int] = (0.0, 0.0, 0.0, 1, 0)
        self._timer: Optional[simpy.Event] = None
        # succeeds when the engine is closed and drained (what a process's end would be)
        self.proc = env.event()
        init = Event(env)  # starts at once, URGENT, as a process does
        init._ok, init._value = True, None
        init.callbacks.append(self._start)
        env.schedule(init, URGENT)

    # ---- called by routers and the step driver -------------------------------------------
    def submit(self, i: int) -> None:
        self.waiting.append(i)
        self.outstanding += 1
        self.poke()

    def charge(self, requests: int) -> None:
        """One call handed this engine `requests` requests: owe its overhead (`call_s`)."""
        if self.call_s is not None and requests > 0:
            if self.merged_calls:
                self.unbilled += requests
            else:
                self.debt += self.call_s(requests)

    def poke(self) -> None:
        """New work may be admissible: wake an idle engine or interrupt a decode interval."""
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()
        elif self.decoding and self._room_for(self.waiting[0] if self.waiting else -1):
            self.decoding = False
            self._interrupt()

    def close(self) -> None:
        """No more submissions: the process ends once its queue and batch drain."""
        self.closed = True
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    # ---- internals -------------------------------------------------------------------------
    def _room_for(self, i: int) -> bool:
        if i < 0 or len(self.heap) >= self.max_seqs:
            return False
        return not self.heap or self.kv_used + self.inp[i] + self.out[i] <= self.kv_cap

    def _admit(self) -> int:
        heap, waiting, S = self.heap, self.waiting, self.S
        inp, out = self.inp, self.out
        pfs = self.pj if heap else self.pf   # joining a decoding batch, or an idle engine
        pf = 0.0
        tokens = n = 0
        while waiting and len(heap) < self.max_seqs:
            i = waiting[0]
            need = inp[i] + out[i]
            if heap and self.kv_used + need > self.kv_cap:
                break
            waiting.popleft()
            self.kv_used += need
            off = inp[i] - S
            self.base += off
            heappush(heap, (S + max(1, out[i]), i, off))
            tokens += inp[i]
            pf += pfs[i]
            n += 1
        if n and self.on_admit is not None:
            self.on_admit(n)
        self._tokens += tokens
        return pf

    def _end_busy(self) -> None:
        if self._busy_from is not None:
            self.busy.append((self._busy_from, self.env.now, self._tokens))
            self._busy_from, self._tokens = None, 0

    # The engine is a state machine driven by SimPy event callbacks, not a SimPy process:
    # it schedules the events a process with the same yields would, in the same order and
    # with the same priorities (an interruption is an URGENT event at `now`, as
    # `Process.interrupt` schedules one), so runs are the same event for event, without a
    # generator resume or an exception per interrupt.
    def _start(self, _ev=None) -> None:
        self._step()

    def _step(self) -> None:
        """The loop head: admit, then start the next decode interval; or wait for work."""
        env, heap = self.env, self.heap
        if not heap and not self.waiting:
            self._end_busy()
            if self.closed:
                self.proc.succeed()
                return
            self.wake = ev = env.event()
            ev.callbacks.append(self._woken)
            return
        if self._busy_from is None:
            self._busy_from = env.now
        if self.unbilled:   # the hand-offs that piled up: one call
            self.debt += self.call_s(self.unbilled)
            self.unbilled = 0
        self.debt += self._admit()  # prefill time owed by newcomers
        B, S = len(heap), self.S
        r = heap[0][0] - S
        dec = self.decode(B, self.base + B * S, r)
        owed = self.debt      # charges that arrive during the interval stay owed
        dt = owed + dec
        self._interval = (env.now, owed, dec, r, B)
        self.decoding = True
        self._timer = t = env.timeout(dt)
        t.callbacks.append(self._ticked)

    def _woken(self, _ev) -> None:
        self.wake = None
        self._step()

    def _interrupt(self) -> None:
        ev = Event(self.env)
        ev._ok, ev._value = True, None
        ev.callbacks.append(self._interrupted)
        self.env.schedule(ev, URGENT)

    def _interrupted(self, _ev) -> None:
        """A newcomer found room mid-interval: cut the interval at the next step boundary."""
        t0, owed, dec, r, B = self._interval
        spent = self.env.now - t0
        if spent <= owed:  # still prefilling: the newcomer joins this prefill
            self._timer = None
            self.debt -= spent
            self._step()
            return
        per = dec / r
        k = max(1, ceil((spent - owed) / per - 1e-9)) if per > 0 else 1
        if k >= r:  # the boundary is the interval's end: `_ticked` re-plans there
            return
        self._timer = t = self.env.timeout(max(0.0, owed + k * per - spent))
        t.callbacks.append(partial(self._at_boundary, k))

    def _at_boundary(self, k: int, ev) -> None:
        """The step boundary a newcomer waited for: credit k steps, then re-plan."""
        if ev is not self._timer:
            return
        self._timer = None
        _, owed, _, _, B = self._interval
        self.debt -= owed
        self.S += k
        self._tokens += k * B
        self._step()

    def _ticked(self, ev) -> None:
        """The interval ran to its end: its requests that finished leave the batch."""
        if ev is not self._timer:  # interrupted: this interval was re-planned
            return
        heap = self.heap
        _, owed, _, r, B = self._interval
        self.debt -= owed
        self.decoding = False
        self.S = S = self.S + r
        self._tokens += r * B
        done = []
        inp, out = self.inp, self.out
        while heap and heap[0][0] == S:
            _, i, off = heappop(heap)
            self.base -= off
            self.kv_used -= inp[i] + out[i]
            done.append(i)
        self.outstanding -= len(done)
        if self.on_drop is not None:
            self.on_drop(self)
        hold = self.on_done(self, done, self.env.now)
        if hold is not None:
            hold.callbacks.append(self._held)
        else:
            self._step()

    def _held(self, _ev) -> None:
        self._step()


class Router:
    """Least-loaded dispatch (fewest outstanding requests, lowest index on ties) with an
    optional bound on requests waiting (not yet admitted) across the engines: beyond it,
    items wait in `overflow` and the producer is handed an event to block on."""

    def __init__(self, env: simpy.Environment, engines: list[GenEngine],
                 capacity: Optional[int] = None) -> None:
        self.env, self.engines, self.capacity = env, engines, capacity
        self.queued = 0
        self.overflow: deque[int] = deque()
        self.blocked: list[simpy.Event] = []
        # (outstanding, engine index) entries; an entry is stale once the engine's count moved
        self.load: list[tuple[int, int]] = [(e.outstanding, k) for k, e in enumerate(engines)]
        for k, e in enumerate(engines):
            e.on_admit = self._admitted
            e.on_drop = self._dropped
            e.router_index = k

    def _dropped(self, e: GenEngine) -> None:
        heappush(self.load, (e.outstanding, e.router_index))

    def _dispatch(self, i: int) -> int:
        """Least-loaded engine (lowest index on ties) from a lazily-updated heap: O(log E)."""
        engines, load = self.engines, self.load
        while True:
            n, k = load[0]
            if engines[k].outstanding == n:
                break
            heappop(load)
        best = engines[k]
        self.queued += 1
        best.submit(i)
        heapreplace(load, (best.outstanding, k))
        return k

    def submit(self, items: Sequence[int]) -> Optional[simpy.Event]:
        cap = self.capacity
        handed: dict[int, int] = {}  # engine index -> requests this call handed it
        for i in items:
            if cap is not None and (self.queued >= cap or self.overflow):
                self.overflow.append(i)
            else:
                k = self._dispatch(i)
                handed[k] = handed.get(k, 0) + 1
        # each engine this call handed requests to owes the call's overhead (O(touched))
        for k in sorted(handed):
            self.engines[k].charge(handed[k])
        if self.overflow:
            ev = self.env.event()
            self.blocked.append(ev)
            return ev
        return None

    def submit_all(self, items: Sequence[int]) -> None:
        """Bulk dispatch at one instant to idle engines: least-loaded is round robin."""
        engines = self.engines
        before = [e.outstanding for e in engines]
        start = min(range(len(engines)), key=lambda k: engines[k].outstanding)
        n = len(engines)
        for j, i in enumerate(items):
            self.queued += 1
            engines[(start + j) % n].submit(i)
        for e, n0 in zip(engines, before):  # each engine owes this one call's overhead
            e.charge(e.outstanding - n0)
        self.load = [(e.outstanding, k) for k, e in enumerate(engines)]
        heapify(self.load)

    def _admitted(self, n: int) -> None:
        self.queued -= n
        cap = self.capacity
        while self.overflow and (cap is None or self.queued < cap):
            self._dispatch(self.overflow.popleft())
        if not self.overflow and self.blocked:
            for ev in self.blocked:
                ev.succeed()
            self.blocked = []

    def close(self) -> None:
        for e in self.engines:
            e.close()

    def procs(self) -> list:
        return [e.proc for e in self.engines]
