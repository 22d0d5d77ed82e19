"""`profile_experiments`: run the executor's micro-benchmarks and build a tables profile.

Why: `yatt profile CONFIG --device cpu|cuda` measures, on this machine, every term the
profiled cost model needs for the models of one experiment (training step, reference
log-probs, vLLM decode/prefill steps, engine teardown/re-create, weight update, one Ray
round trip and, on CPU, how much those ops slow down when several devices of the host run
them at once) and writes them as `yatt.profile/1` tables. This module measures the
in-process tables and assembles the file; the terms timed through Ray are
`yatt.profiling.ray_tables`, the point sets `yatt.profiling.points`. The measuring code
lives in `yatt.profiling.microbench*` (it touches torch/vLLM/Megatron) and is imported
lazily, so the planner stays importable without the executor.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import time
from typing import Optional, Sequence

from yatt.core.plan import Experiment

from yatt.planner.costmodel import Efficiency
from yatt.planner.hostscale import HostProbe
from yatt.planner.profile_io import EngineTable, ModelTables, Profile, ProfileTables

from . import carry, hostcheck, ray_tables
from .points import Points, Tick, models_to_measure


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
    if base is not None and not carry.lacks(base[0], ray_tables.ray_needs(exps, pts, device), device):
        models, fields, note = carry.carried(base[0], base[1], models, HostProbe.from_parts(probe))
        if pts.own_ray and pts.ray:
            from yatt.profiling import microbench_ray as mbr

            with mbr.local_ray():
                models = ray_tables.own_ray_tables(exps, device, pts, tick, seed, models)
            note += "; trainer groups and engine calls measured here"
        fields.update(load_avg=round((load0 + os.getloadavg()[0]) / 2, 2))
    else:
        models, fields, note = ray_tables.ray_tables(exps, device, pts, tick, seed, models, load0)
    probe += mb.host_probe_parts(pts.host_probe_s)
    tables = ProfileTables(device=device, models=models, **fields,
                           host_probe_s=round(statistics.median(a + b for a, b in probe), 6),
                           host_probe_python_s=round(statistics.median(a for a, _ in probe), 6),
                           host_probe_matmul_s=round(statistics.median(b for _, b in probe), 6),
                           host_id=hostcheck.machine_id())
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
