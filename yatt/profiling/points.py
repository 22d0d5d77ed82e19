"""Where `yatt profile` measures: the point sets (full, quick, smoke), the models an
experiment list needs measured, and the helpers that shape measured numbers into tables.

Why: the in-process tables (`yatt.profiling.profile`) and the Ray-path tables
(`yatt.profiling.ray_tables`) both choose their points from one `Points`; keeping it here
lets the two modules share it without importing each other.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from yatt.core.plan import Experiment

from yatt.planner.profile_io import ModelTables

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


def with_engine(m: ModelTables, **fields) -> ModelTables:
    """`m` with these fields of its engine table replaced."""
    return dataclasses.replace(m, engine=dataclasses.replace(m.engine, **fields))


def table_points(points) -> tuple[tuple[float, float], ...]:
    """(count, seconds) pairs as a profile table stores them."""
    return tuple((float(n), round(t, 6)) for n, t in points)
