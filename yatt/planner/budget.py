"""How much simulation a plan, replay or calibration will run, estimated before it starts.

Why: every field can be within its ceiling (`yatt.core.limits`) while their product is
not: 10^6 samples a step x 100 seeds x a dozen candidates is years of simulation. The
verbs estimate their work here, in simulated requests (`limits.sim_requests`: samples x
steps, plus devices), and refuse it past `YATT_MAX_SIM_WORK` in one line that names the
field driving it, before anything runs. The estimates err high (a search usually runs
fewer simulations than `search_simulations` says); the simulator also meters what really
runs (`limits.charge`), so a low estimate still cannot run unbounded.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from yatt.core.errors import InputError
from yatt.core.limits import DEVICE_REQUESTS, check_work, sim_requests
from yatt.core.plan import Experiment
from yatt.core.roles import Mode
from yatt.core.specs import ClusterSpec
from yatt.core.trace import Trace

from .candidate import async_steps
from .search import placeable_space
from .fullsize import slice_experiment, slice_factor
from .sizes import resize

FIRST_SPLIT_SIMS = 20   # a guarded ternary split search: 5-point grid, refine, bounded scan
LOCAL_SPLIT_SIMS = 4    # a hill-climb from the first pair's optimum (typically 2-4 steps)
SWEEPS = 2              # coordinate-descent sweeps (splitsearch.coordinate_descent)


def one_simulation(exp: Experiment, steps: int = 1, samples: Optional[int] = None) -> float:
    """Simulated requests of one simulation of `steps` steps (`samples` per step: recorded)."""
    return sim_requests(exp.workload.expected_requests if samples is None else samples,
                        exp.cluster.num_gpus, steps)


def search_simulations(exp: Experiment) -> int:
    """Simulations one placement search runs before re-seeding its shortlist (an upper
    estimate from the TP choices and trainer TP x PP layouts that fit: coordinate descent
    over them, and a split search per point it visits). InputError when nothing can be
    placed."""
    space = placeable_space(exp)
    r, g, t = len(space.rollout_tps), max(1, len(space.genrm_tps)), len(space.trainer_layouts)
    colocate = Mode.COLOCATE in exp.search.modes or exp.genrm is None
    n = 0
    if colocate:
        n += SWEEPS * (r + g + t)
    if Mode.PARTIAL in exp.search.modes and exp.genrm is not None:
        # without a colocate search, the partial search also walks the trainer layouts
        n += FIRST_SPLIT_SIMS + LOCAL_SPLIT_SIMS * SWEEPS * (r + g + (0 if colocate else t))
    if Mode.ASYNC in exp.search.modes and slice_factor(exp) == 1:
        # each async simulation runs async_steps(k) steps: counted as that many simulations
        ks = len(set(exp.search.staleness_choices))
        sims = FIRST_SPLIT_SIMS + LOCAL_SPLIT_SIMS * (SWEEPS * r + ks) + 1
        n += sims * async_steps(max(exp.search.staleness_choices))
    return max(1, n)


def search_work(exp: Experiment, top: int, seeds: Optional[int] = None, steps: int = 1,
                samples: Optional[int] = None) -> tuple[float, str]:
    """(simulated requests, the field that drives them) of `search(exp, top=top, ...)`."""
    seeds = seeds or exp.search.seeds
    factor = slice_factor(exp, replaying=samples is not None)
    small = slice_experiment(exp, factor) if factor > 1 else exp
    per = one_simulation(small, steps, samples)
    explore = search_simulations(small) * per
    shortlist = (min(top, 2) if factor > 1 else top + 2)
    reseed = shortlist * (seeds if factor > 1 else seeds - 1) * one_simulation(exp, steps, samples)
    if reseed > explore:
        field = "search.seeds"
    elif exp.cluster.num_gpus * DEVICE_REQUESTS > exp.workload.expected_requests:
        field = "cluster.nodes"
    else:
        field = "workload.prompts_per_step"
    return explore + reseed, field


def check_plan(exp: Experiment, top: int, sizes: Sequence[int], file: str = "",
               given: bool = False) -> None:
    """Refuse `yatt plan` (a search, a given placement scored over the same seeds, and a
    search per --gpus size) past the work budget, or an experiment that cannot be placed."""
    try:
        work, field = search_work(exp, top)
    except InputError as e:
        raise e.within(file=file) from None
    if given:
        work += exp.search.seeds * one_simulation(exp)
    check_work(work, field, "the placement search's simulations", file)
    extra = 0.0
    for g in sizes:
        try:
            extra += search_work(resize(exp, g), 1)[0]
        except InputError:   # a size nothing fits on: `yatt plan` skips it with a note
            continue
    check_work(work + extra, "--gpus", "the placement searches' simulations (one per --gpus size)",
               file, allowed="fewer or smaller --gpus sizes")


def check_replay(trace: Trace, sizes: Sequence[int], modes: Sequence[Mode],
                 cluster: Optional[ClusterSpec] = None, file: str = "") -> None:
    """Refuse `yatt replay` (the recorded steps re-simulated, then a search and a replay per
    --gpus size) past the work budget."""
    exp = trace.meta.plan.experiment
    steps = len({s.step for s in trace.samples})
    per_step = -(-len(trace.samples) // max(1, steps))
    base = one_simulation(exp, steps, per_step)
    check_work(base, "sample", "re-simulating the recorded steps", file,
               allowed="a trace with fewer steps or samples")
    extra = 0.0
    for g in sizes:
        sized = resize(exp, g, cluster)
        sized = dataclasses.replace(sized, search=dataclasses.replace(sized.search, modes=tuple(modes)))
        try:
            extra += search_work(sized, 1, seeds=1, samples=per_step)[0]
        except InputError as e:   # as `what_if` says it, before any work
            raise InputError(f"{g} x {sized.cluster.gpu.name}: {e.message}", field="--gpus") from None
        extra += len(modes) * one_simulation(sized, steps, per_step)
    check_work(base + extra, "--gpus", "the what-if searches' simulations (one per --gpus size)",
               file, allowed="fewer or smaller --gpus sizes")
