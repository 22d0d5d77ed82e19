"""`profile_experiment`: run the executor's micro-benchmarks and build a tables profile.

Why: `yatt profile CONFIG --device cpu|cuda` measures, on this machine, every term the
profiled cost model needs for the models of one experiment (training step, reference
log-probs, vLLM decode/prefill steps, engine teardown/re-create, weight update, one Ray
round trip and, on CPU, how much those ops slow down when several devices of the host run
them at once) and writes them as `yatt.profile/1` tables. The measuring code lives in
`yatt.profiling.microbench` (it touches torch/vLLM/Megatron); this module only chooses the
points, reports progress and assembles the file, and imports exec lazily so the planner
stays importable without the executor.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from yatt.core.plan import Experiment

from yatt.planner.costmodel import Efficiency
from yatt.planner.hostscale import HostProbe
from yatt.planner.profile_io import Contention, EngineTable, ModelTables, Profile, ProfileTables

from . import carry

Tick = Callable[[str], None]


@dataclass(frozen=True)
class Points:
    """Where to measure: the full set (the shipped profile), `quick()` (users re-profiling a
    host) or `smoke()` (tests)."""

    train: tuple[tuple[int, int], ...] = ((1, 16), (4, 32), (8, 32), (16, 32), (32, 32),
                                          (8, 64), (16, 64), (4, 128), (32, 16))
    logprob: tuple[tuple[int, int], ...] = ((1, 16), (8, 32), (16, 32), (8, 64), (4, 128))
    decode: tuple[tuple[int, int], ...] = ((1, 16), (4, 16), (16, 16), (32, 16), (64, 16),
                                           (8, 64), (32, 64), (16, 128))
    prefill: tuple[tuple[int, int], ...] = ((1, 16), (1, 64), (8, 32), (32, 32), (16, 64))
    # (running, new, prompt tokens): requests admitted into a decoding batch (streaming)
    join: tuple[tuple[int, int, int], ...] = ((4, 1, 24), (4, 4, 24), (16, 1, 24), (16, 8, 24),
                                             (8, 2, 64), (8, 8, 64))
    decode_steps: int = 8
    reps: int = 3
    restarts: int = 3
    rpc_reps: int = 50
    handoff_reps: int = 9       # paired (alone, streaming) generate calls for the hand-off
    ray: bool = True
    # host contention (CPU only): busy-device counts to measure; None = 2 .. the largest
    # cluster among the experiments (at most MAX_CONTENTION_BUSY); () = skip
    contention: Optional[tuple[int, ...]] = None
    contention_rounds: int = 7
    stop_samples: int = 128     # responses generated with EOS allowed (the actor's stop lengths)
    # passes over each point list, median per point over passes (see microbench: a shared
    # VM flips between fast and slow states every few seconds)
    passes: int = 5
    # TP groups of the trainer to time on this host (TP>1 training: its collectives are
    # whatever this host's interconnect makes them); None = the experiments' trainer TP
    # choices that fit their clusters (at most MAX_TP_MEASURED); () = skip, DP groups too
    # (DP>1 at TP=1: `dp_sizes`, timed at the same points, batch per DP rank)
    tp: Optional[tuple[int, ...]] = None
    tp_points: tuple[tuple[int, int], ...] = ((8, 32), (16, 64), (4, 128))
    # seconds of the host-speed probe at the start, middle and end of a profile
    host_probe_s: float = 3.0
    # with a base to carry Ray-path terms from: still measure here the ones that are each
    # model's own work (trainer TP / DP group steps, engine call overheads), which moved
    # 0.35-1.3x between two hosts whose in-process tables moved 1.2-1.3x (docs/fidelity.md)
    own_ray: bool = False
    # calls per size for an engine's call overhead (a difference of two timings: noisier
    # than a table point, and cheap once the engine is up)
    call_reps: int = 6

    @classmethod
    def quick(cls) -> "Points":
        """`yatt profile --quick`: the full set's points for every in-process table (they
        cost seconds, and fewer points bend the fits: bench/quick_profile.py), one pass,
        fewer repetitions and a shorter host probe, but as many engine re-creates and stop
        lengths (the a-priori length distribution: half the samples moved a long-tailed
        workload's mean response by 15%);
        with a base profile the host-wide Ray-path terms (round trip, transfers, hand-off,
        weight sync, contention) are carried from it (`carry`) and the trainer groups and
        engine calls are measured here, else every term is measured with fewer repetitions
        and rounds: a minute or two instead of ten, for re-profiling a host rather than
        trusting a stale profile."""
        return cls(reps=2, restarts=3, rpc_reps=20, handoff_reps=5, contention_rounds=3,
                   passes=1, tp_points=((8, 32), (4, 128)), host_probe_s=1.0, own_ray=True)

    @classmethod
    def smoke(cls) -> "Points":
        """A reduced set for tests (`yatt profile --smoke`, hidden): in-process tables only
        (no Ray, no contention, no TP / DP groups), tiny sizes. Not a usable profile of a
        host: plans from it price the missing terms analytically."""
        return cls(train=((2, 16), (8, 32), (4, 64)), logprob=((2, 16), (8, 32), (2, 64)),
                   decode=((1, 16), (8, 16), (8, 48)), prefill=((1, 32), (8, 32)),
                   join=((4, 2, 24),),
                   decode_steps=4, reps=1, restarts=1, rpc_reps=5, ray=False, contention=(),
                   stop_samples=8, passes=1, tp=(), host_probe_s=0.3)

    def busy_counts(self, exps: Sequence[Experiment], device: str) -> tuple[int, ...]:
        """Busy-device counts the contention benchmark measures (none on GPUs)."""
        if device != "cpu":
            return ()
        if self.contention is not None:
            return tuple(sorted({int(b) for b in self.contention if b >= 2}))
        top = min(MAX_CONTENTION_BUSY, max((e.cluster.num_gpus for e in exps), default=1))
        return tuple(range(2, top + 1))

    def tp_sizes(self, exps: Sequence[Experiment], actor: str) -> tuple[int, ...]:
        """Trainer TP sizes to time for `actor`."""
        if self.tp is not None:
            return tuple(sorted({int(t) for t in self.tp if t >= 2}))
        return tuple(sorted({t for e in exps if e.actor.name == actor
                             for t in e.search.tp_choices
                             if 2 <= t <= min(MAX_TP_MEASURED, e.cluster.num_gpus)
                             and e.actor.check_tp(t) is None}))

    def dp_sizes(self, exps: Sequence[Experiment], actor: str) -> tuple[int, ...]:
        """Trainer DP sizes (at TP=1) to time for `actor`: what the experiments' clusters
        give a TP=1 trainer, 2 .. MAX_TP_MEASURED devices; none where TP groups are
        skipped (`tp=()`, the smoke set)."""
        if self.tp == ():
            return ()
        return tuple(sorted({n for e in exps if e.actor.name == actor
                             for t in e.search.tp_choices
                             if e.cluster.num_gpus % t == 0 and e.actor.check_tp(t) is None
                             and 2 <= (n := e.cluster.num_gpus // t) <= MAX_TP_MEASURED}))

    def ticks(self, actors: int, genrms: int, busy: int = 0, tps: int = 0) -> int:
        """Progress ticks of a profile (`tps`: TP and DP groups timed, over all actors).
        With Ray: the round trip, and per actor two transfers, a weight sync and an engine
        call; per GenRM an engine call, and the stream hand-off once. With contention:
        each busy count and 1, and each GenRM's own."""
        per_engine = 1 + self.restarts + 2
        per_actor = 4 + max(1, self.passes) + per_engine
        ray = int(self.ray) * (1 + 4 * actors + genrms) + int(self.ray and genrms > 0)
        return (per_actor * actors + per_engine * genrms + ray
                + (busy + 1 + genrms if busy else 0) + tps)


MAX_CONTENTION_BUSY = 4
MAX_TP_MEASURED = 4


def _engine_table(bench) -> EngineTable:
    return EngineTable(start_s=round(bench.start_s, 4), stop_s=round(bench.stop_s, 4),
                       decode=tuple((float(b), float(c), round(t, 6)) for b, c, t in bench.decode),
                       prefill=tuple((float(n), float(p), round(t, 6)) for n, p, t in bench.prefill),
                       join=tuple((float(r), float(k), float(p), round(max(0.0, t), 6))
                                  for r, k, p, t in bench.join),
                       restart=tuple((float(k), round(a, 4), round(b, 4))
                                     for k, a, b in bench.restart))


def _joins(points, max_num_seqs: int) -> tuple[tuple[int, int, int], ...]:
    """The join points that fit the engine's batch limit."""
    return tuple(p for p in points if p[0] + p[1] <= max_num_seqs)


# the executor's engines hold 512 tokens (runner.py); leave room for the prompt
STOP_CAP_MAX = 448


def stop_cap(exps: Sequence[Experiment], actor: str) -> int:
    """The budget for measuring an actor's stop lengths: the largest response budget any of
    `exps` gives it (so no experiment's budget exceeds the measured range), at most
    STOP_CAP_MAX."""
    return min(STOP_CAP_MAX, max(e.workload.response_len.upper() for e in exps
                                 if e.actor.name == actor))


def _group_table(exp: Experiment, device: str, pts: Points, sizes: Sequence[int], tick: Tick,
                 seed: int, dp: bool) -> tuple[tuple[float, float, float, float], ...]:
    """(size, batch, seq, s) for each TP size (or, with `dp`, each DP size at TP=1) in
    `sizes`, at `pts.tp_points` (batch: per DP rank)."""
    from yatt.profiling import microbench as mb
    from yatt.profiling import microbench_ray as mbr

    out = []
    for n in sizes:
        tp, dp_n = (1, n) if dp else (n, 1)
        ts = mbr.group_train_times(exp.actor, mb.model_path(exp.actor, seed), device, tp,
                                   pts.tp_points, pts.reps, pts.passes,
                                   exp.algo.micro_batch_tokens, seed, dp=dp_n)
        out += [(float(n), float(b), float(s), round(t, 6)) for (b, s), t in zip(pts.tp_points, ts)]
        tick(f"{exp.actor.name}: train {'DP' if dp else 'TP'}={n}")
    return tuple(out)


def sync_counts(exps: Sequence[Experiment], actor: str) -> tuple[int, ...]:
    """Rollout engine counts to time weight sync to: 1 .. the largest cluster of the
    experiments with this actor (one TP=1 engine per device), at most MAX_TP_MEASURED."""
    top = max((e.cluster.num_gpus for e in exps if e.actor.name == actor), default=1)
    return tuple(range(1, min(MAX_TP_MEASURED, top) + 1))


def _sync_table(exp: Experiment, exps: Sequence[Experiment], device: str, pts: Points,
                tick: Tick, seed: int) -> tuple[tuple[float, float], ...]:
    """(engines, s) of a weight sync on the executor's path (`microbench_engines.sync_times`)."""
    from yatt.profiling import microbench as mb
    from yatt.profiling import microbench_engines as mbe

    counts = sync_counts(exps, exp.actor.name)
    ts = mbe.sync_times(exp.actor, mb.model_path(exp.actor, seed), device, counts,
                        max(3, pts.reps * pts.passes), exp.engine.max_num_seqs,
                        exp.engine.gpu_memory_utilization, exp.algo.micro_batch_tokens, tick)
    return _points(zip(counts, ts))


def _actor_tables(exp: Experiment, device: str, pts: Points, rng, tick: Tick, seed: int,
                  cap: int) -> ModelTables:
    from yatt.profiling import microbench as mb

    eng = exp.engine
    actor_path = mb.model_path(exp.actor, seed)
    mbt = exp.algo.micro_batch_tokens
    tb = mb.TrainBench(exp.actor, actor_path, device, mbt)
    tick(f"{exp.actor.name}: trainer up")
    done = [0]

    def train_point(point: tuple[int, int]) -> float:
        t = tb.step_time(point[0], point[1], pts.reps, rng)
        done[0] += 1
        if done[0] % len(pts.train) == 0:
            tick(f"{exp.actor.name}: train pass {done[0] // len(pts.train)}/{pts.passes}")
        return t

    train = [(float(b), float(s), round(t, 6)) for (b, s), t in
             zip(pts.train, mb.over_passes(pts.train, train_point, pts.passes))]
    logprob = [(float(b), float(s), round(t, 6)) for b, s, t in
               mb.logprob_times(actor_path, device, pts.logprob, exp.actor.vocab, pts.reps, rng,
                                tick, pts.passes)]
    decode = tuple((min(b, eng.max_num_seqs), c) for b, c in pts.decode)
    bench, core = mb.engine_bench(exp.actor, actor_path, device, max_num_seqs=eng.max_num_seqs,
                                  mem_util=eng.gpu_memory_utilization, decode_points=decode,
                                  prefill_points=pts.prefill, decode_steps=pts.decode_steps,
                                  reps=pts.reps, restarts=pts.restarts, rng=rng, tick=tick,
                                  keep=True, passes=pts.passes,
                                  join_points=_joins(pts.join, eng.max_num_seqs))
    sd_s, state = tb.state_dict_time(pts.reps)
    upd_s = mb.weight_update_time(core, state, pts.reps)
    core.stop()
    tb.close()
    tick(f"{exp.actor.name}: weight sync")
    stops = mb.stop_lengths(actor_path, device, exp.workload, cap, pts.stop_samples, seed, tick)
    return ModelTables(train=tuple(train), logprob=tuple(logprob), engine=_engine_table(bench),
                       weight_sync_s=round(sd_s + upd_s, 6), micro_batch_tokens=mbt,
                       stop_len=tuple(sorted(stops)), stop_cap=cap, shape=exp.actor.shape_key)


def _with_engine(m: ModelTables, **fields) -> ModelTables:
    """`m` with these fields of its engine table replaced."""
    return dataclasses.replace(m, engine=dataclasses.replace(m.engine, **fields))


def _points(points) -> tuple[tuple[float, float], ...]:
    """(count, seconds) pairs as a profile table stores them."""
    return tuple((float(n), round(t, 6)) for n, t in points)


def engine_contention(exp: Experiment, device: str, busy: Sequence[int], rounds: int,
                      tick: Optional[Tick] = None, seed: int = 0
                      ) -> tuple[tuple[float, float], ...]:
    """(busy, ratio) of the experiment's GenRM engines: a judge-like batch with n engines of
    it generating at once over one alone, median of the paired per-round ratios."""
    from yatt.profiling import microbench as mb
    from yatt.profiling import microbench_engines as mbe

    busy = tuple(sorted({int(n) for n in busy if n >= 2}))
    if not busy:
        return ()
    t = mbe.engine_contention_times(exp.genrm, mb.model_path(exp.genrm, seed), device, busy,
                                    rounds, exp.engine.genrm_max_num_seqs, seed)
    if tick:
        tick(f"{exp.genrm.name}: engine contention")
    return tuple((float(n), round(float(statistics.median(
        [a / b for a, b in zip(t[n], t[1]) if b > 0] or [1.0])), 4)) for n in busy)


def _genrm_tables(exp: Experiment, device: str, pts: Points, rng, tick: Tick, seed: int) -> ModelTables:
    from yatt.profiling import microbench as mb

    eng = exp.engine
    gdecode = tuple((min(b, eng.genrm_max_num_seqs), c) for b, c in pts.decode)
    gbench, _ = mb.engine_bench(exp.genrm, mb.model_path(exp.genrm, seed), device,
                                max_num_seqs=eng.genrm_max_num_seqs,
                                mem_util=eng.gpu_memory_utilization, decode_points=gdecode,
                                prefill_points=pts.prefill, decode_steps=pts.decode_steps,
                                reps=pts.reps, restarts=pts.restarts, rng=rng, tick=tick,
                                passes=pts.passes,
                                join_points=_joins(pts.join, eng.genrm_max_num_seqs))
    return ModelTables(engine=_engine_table(gbench), shape=exp.genrm.shape_key)


def measure_contention(exp: Experiment, device: str, busy: Sequence[int], rounds: int,
                       tick: Optional[Tick] = None, seed: int = 0) -> tuple[Contention, ...]:
    """Ratios of each op's time with n devices busy at once to one busy, for n in `busy`,
    with the experiment's actor. One pool of Ray worker actors measures every count,
    interleaved round by round (the same harness and background load for all counts, so
    only the contention differs). ~1 minute for the demo models on a quiet box."""
    from yatt.profiling import microbench as mb
    from yatt.profiling import microbench_ray as mbr

    tick = tick or (lambda _what: None)
    busy = tuple(sorted({int(n) for n in busy if n >= 2}))
    if not busy:
        return ()
    t = mbr.contention_times(exp.actor, mb.model_path(exp.actor, seed), device, (1,) + busy,
                             rounds, exp.algo.micro_batch_tokens, seed)
    tick("contention: 1 device busy")

    def ratio(n: int, k: str) -> float:
        """Median over rounds of the paired ratio (the same round's n-busy over 1-busy)."""
        rs = [a / b for a, b in zip(t[n][k], t[1][k]) if b > 0]
        return round(float(statistics.median(rs)), 4) if rs else 1.0

    out = []
    for n in busy:
        r = {k: ratio(n, k) for k in mbr.CONTENTION_OPS}
        out.append(Contention(busy=n, **r))
        tick(f"contention: {n} devices busy")
    return tuple(out)


def models_to_measure(exps: Sequence[Experiment]) -> tuple[list, list]:
    """(actor experiments, GenRM experiments), one per distinct model name; a model that is
    an actor somewhere is measured as an actor (its tables are a superset)."""
    actors: dict[str, Experiment] = {}
    genrms: dict[str, Experiment] = {}
    for e in exps:
        actors.setdefault(e.actor.name, e)
    for e in exps:
        if e.algo.reward.needs_genrm and e.genrm.name not in actors:
            genrms.setdefault(e.genrm.name, e)
    return list(actors.values()), list(genrms.values())


def ray_needs(exps: Sequence[Experiment], pts: Points, device: str) -> carry.RayNeeds:
    """What `profile_experiments` measures through Ray for `exps` with `pts`."""
    actors, genrms = models_to_measure(exps)
    return carry.RayNeeds(
        ray=pts.ray, streams=any(e.genrm is not None for e in exps),
        busy=pts.busy_counts(exps, device),
        actors=tuple((e.actor.name, pts.tp_sizes(exps, e.actor.name),
                      pts.dp_sizes(exps, e.actor.name), sync_counts(exps, e.actor.name))
                     for e in actors),
        genrms=tuple(e.genrm.name for e in genrms),
        shapes=tuple((m.name, m.shape_key) for m in
                     [e.actor for e in actors] + [e.genrm for e in genrms]))


def profile_experiments(exps: Sequence[Experiment], device: str, points: Optional[Points] = None,
                        tick: Optional[Tick] = None, seed: int = 0,
                        base: Optional[tuple[Profile, str]] = None) -> Profile:
    """Measure every distinct actor (and GenRM) of `exps` on this machine; one profile.
    `base`: (profile, its path) to take the Ray-path terms from, rescaled to this host
    (`yatt.profiling.carry`), when it has all of them for `exps`; else every term is
    measured."""
    import numpy as np

    from yatt.profiling import microbench as mb

    pts = points or Points()
    tick = tick or (lambda _what: None)
    mb.prepare(device)
    rng = np.random.default_rng(seed)
    t_start = time.perf_counter()
    load0 = os.getloadavg()[0]
    actors, genrms = models_to_measure(exps)
    probe = mb.host_probe_parts(pts.host_probe_s)
    models = {e.actor.name: _actor_tables(e, device, pts, rng, tick, seed,
                                          stop_cap(exps, e.actor.name)) for e in actors}
    models.update({e.genrm.name: _genrm_tables(e, device, pts, rng, tick, seed) for e in genrms})
    probe += mb.host_probe_parts(pts.host_probe_s)
    if base is not None and not carry.lacks(base[0], ray_needs(exps, pts, device), device):
        models, fields, note = carry.carried(base[0], base[1], models, HostProbe.from_parts(probe))
        if pts.own_ray and pts.ray:
            from yatt.profiling import microbench_ray as mbr

            with mbr.local_ray():
                models = _own_ray_tables(exps, device, pts, tick, seed, models)
            note += "; trainer groups and engine calls measured here"
        fields.update(load_avg=round((load0 + os.getloadavg()[0]) / 2, 2))
    else:
        models, fields, note = _ray_tables(exps, device, pts, tick, seed, models, load0)
    probe += mb.host_probe_parts(pts.host_probe_s)
    tables = ProfileTables(device=device, models=models, **fields,
                           host_probe_s=round(statistics.median(a + b for a, b in probe), 6),
                           host_probe_python_s=round(statistics.median(a for a, _ in probe), 6),
                           host_probe_matmul_s=round(statistics.median(b for _, b in probe), 6))
    first = models[actors[0].actor.name]
    # the analytic fallback (terms without a table) gets this machine's fixed overheads too
    eff = dataclasses.replace(Efficiency(), engine_start_s=first.engine.start_s,
                              switch_overhead_s=first.engine.stop_s,
                              sync_overhead_s=first.weight_sync_s)
    c = exps[0].cluster
    names = " ".join(e.name for e in exps)
    took = f"{time.perf_counter() - t_start:.0f} s" + (f"; {note}" if note else "")
    return Profile(efficiency=eff, hardware=f"{c.num_gpus} x {c.gpu.name} ({device})",
                   source=f"yatt profile {names} --device {device} ({took})", tables=tables)


def _own_ray_tables(exps: Sequence[Experiment], device: str, pts: Points, tick: Tick, seed: int,
                    models: dict) -> dict:
    """`models` with the Ray-path tables that are each model's own work on this host: the
    trainer's TP / DP group steps and every engine's call overhead. Inside a Ray session."""
    from yatt.profiling import microbench as mb
    from yatt.profiling import microbench_engines as mbe

    models = dict(models)
    actors, genrms = models_to_measure(exps)
    for e in actors:
        tps, dps = pts.tp_sizes(exps, e.actor.name), pts.dp_sizes(exps, e.actor.name)
        if tps or dps:
            models[e.actor.name] = dataclasses.replace(
                models[e.actor.name],
                train_tp=_group_table(e, device, pts, tps, tick, seed, dp=False),
                train_dp=_group_table(e, device, pts, dps, tick, seed, dp=True))
    if not pts.ray:
        return models
    for e in actors:   # each engine model's call overhead on the executor's actors
        models[e.actor.name] = _with_engine(models[e.actor.name], call=_points(
            mbe.call_overhead_times(e.actor, mb.model_path(e.actor, seed), device,
                                    pts.call_reps, e.engine.max_num_seqs, seed=seed,
                                    tick=tick)))
    for e in genrms:
        judge = mbe.JudgeSetup(mb.model_path(e.actor, seed), e.actor.vocab,
                               e.workload.judge_max_tokens)
        models[e.genrm.name] = _with_engine(models[e.genrm.name], call=_points(
            mbe.call_overhead_times(e.genrm, mb.model_path(e.genrm, seed), device,
                                    pts.call_reps, e.engine.genrm_max_num_seqs,
                                    judge=judge, seed=seed, tick=tick)))
    return models


def _ray_tables(exps: Sequence[Experiment], device: str, pts: Points, tick: Tick, seed: int,
                models: dict, load0: float) -> tuple[dict, dict, str]:
    """(models with their Ray-path tables, the host-wide ProfileTables fields, "") measured
    through Ray: TP / DP groups, weight sync to engine actors, round trips, transfers, the
    stream hand-off, engine call overheads and host contention."""
    from yatt.profiling import microbench as mb
    from yatt.profiling import microbench_engines as mbe
    from yatt.profiling import microbench_ray as mbr

    actors, genrms = models_to_measure(exps)
    # after the in-process tables: the Ray benchmarks share one session (a session per
    # benchmark would cost seconds each)
    with mbr.local_ray() if pts.ray else contextlib.nullcontext():
        models = _own_ray_tables(exps, device, pts, tick, seed, models)
        if pts.ray:
            for e in actors:
                models[e.actor.name] = dataclasses.replace(
                    models[e.actor.name], sync=_sync_table(e, exps, device, pts, tick, seed))
        # the actors' weights through the object store (weight sync), and 4x that for a slope
        sizes = sorted({int(e.actor.params * e.actor.dtype_bytes * k) for e in actors for k in (1, 4)})
        rpc, moved = mbr.ray_times(pts.rpc_reps, sizes, tick) if pts.ray else (0.0, ())
        rpc = round(rpc, 6)
        streams = pts.ray and any(e.genrm is not None for e in exps)
        handoff = (mbe.handoff_time(mb.model_path(actors[0].actor, seed), actors[0].actor.vocab,
                                    pts.handoff_reps, seed=seed, tick=tick) if streams else 0.0)
        load = round((load0 + os.getloadavg()[0]) / 2, 2)
        c_load0 = os.getloadavg()[0]
        cont = measure_contention(actors[0], device, pts.busy_counts(exps, device),
                                  pts.contention_rounds, tick, seed)
        for e in genrms:   # each GenRM's own engine contention (a larger model contends more)
            ec = engine_contention(e, device, pts.busy_counts(exps, device), pts.contention_rounds,
                                   tick, seed)
            if ec:
                models[e.genrm.name] = _with_engine(models[e.genrm.name], contention=ec)
        c_load = round((c_load0 + os.getloadavg()[0]) / 2, 2) if cont else 0.0
    return models, dict(rpc_s=rpc, load_avg=load, contention=cont, contention_load_avg=c_load,
                        transfer=_points(moved), handoff_s=round(handoff, 6)), ""
