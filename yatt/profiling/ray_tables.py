"""The profile's Ray-path tables: what `yatt profile` measures through Ray worker actors.

Why: the executor's roles talk through Ray, so the trainer's TP / DP group steps, weight
sync to engine actors, engine call overheads, round trips, object-store transfers, the
stream hand-off and host contention are timed on that path, in one Ray session per
profile, after the in-process tables (`yatt.profiling.profile`). The measuring code is in
`microbench_ray` and `microbench_engines`; this module picks the points and shapes tables.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
from typing import Optional, Sequence

from yatt.core.plan import Experiment

from yatt.planner.profile_io import Contention

from . import carry
from .points import MAX_TP_MEASURED, Points, Tick, models_to_measure, table_points, with_engine


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
    return table_points(zip(counts, ts))


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
                     [e.actor for e in actors] + [e.genrm for e in genrms]),
        own=pts.own_ray)


def own_ray_tables(exps: Sequence[Experiment], device: str, pts: Points, tick: Tick, seed: int,
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
    # each engine model's call overhead on the executor's actors
    jobs = {e.actor.name: mbe.CallJob(e.actor, mb.model_path(e.actor, seed), e.engine.max_num_seqs)
            for e in actors}
    jobs.update({e.genrm.name: mbe.CallJob(
        e.genrm, mb.model_path(e.genrm, seed), e.engine.genrm_max_num_seqs,
        mbe.JudgeSetup(mb.model_path(e.actor, seed), e.actor.vocab, e.workload.judge_max_tokens))
        for e in genrms})
    calls = mbe.call_overhead_tables(list(jobs.values()), device, pts.call_reps, seed=seed,
                                     tick=tick)
    for name, call in zip(jobs, calls):
        models[name] = with_engine(models[name], call=table_points(call))
    return models


def ray_tables(exps: Sequence[Experiment], device: str, pts: Points, tick: Tick, seed: int,
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
        models = own_ray_tables(exps, device, pts, tick, seed, models)
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
                models[e.genrm.name] = with_engine(models[e.genrm.name], contention=ec)
        c_load = round((c_load0 + os.getloadavg()[0]) / 2, 2) if cont else 0.0
    return models, dict(rpc_s=rpc, load_avg=load, contention=cont, contention_load_avg=c_load,
                        transfer=table_points(moved), handoff_s=round(handoff, 6)), ""
