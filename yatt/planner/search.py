"""Placement search: pick mode, GPU split and TP per role by simulating candidates.

Why: the step time of a placement has no closed form (long tails, streaming, KV limits),
so the simulator is the oracle, and each call costs ~0.1-1 s. The search spends few calls:

- Full colocate: the phases run one after another, so step time is (nearly) separable in
  the TP of each role and the trainer's TP x PP layout. Coordinate descent over each
  role's feasible options finds the optimum in 1 + sum(options - 1) simulations.
- Partial colocate: for each (rollout TP, GenRM TP) pair, step time over the split
  r = rollout devices is usually unimodal (too few rollout devices: rollout-bound; too
  few GenRM devices: judge-bound). A coarse grid checks that; if the grid is unimodal,
  an integer ternary search refines inside the bracket (as WeChat-YATT describes). If it
  is not, we fall back to a bounded scan and say so. A final hill-climb checks neighbours.
  The trainer runs on every device after generation in both modes, so its layout adds the
  same time to either: partial colocate takes the layout full colocate found best (and
  searches it as a third coordinate when full colocate is not searched).
- The best few candidates are re-simulated over `search.seeds` seeds: mean +/- spread.
- Above 128 devices the search runs on a load-preserving slice, then takes its shortlist
  back to full size: splits placed at full resolution with the fluid model, finalists
  simulated where the budget allows (`search`).
- Async (generators and trainer on disjoint devices, steps overlapped): each candidate is
  simulated over `async_steps` of the largest k searched and ranked by its steady state
  (the steps after the warm-up fill). The split between generator and trainer devices gets the guarded
  ternary search at the first staleness bound k and the best TPs of the other modes; the
  other rollout TPs and k values hill-climb from that split's fraction, so async adds a
  bounded number of simulations. With a GenRM on its own devices the rollout keeps the
  share of the generator devices partial colocate found best (half without it); the GenRM
  on the rollout's devices is tried at the best split. Sliced (large-cluster) searches
  leave async out (the fluid model prices one colocate or partial step).

`exhaustive=True` simulates everything (for tests and the regret benchmark).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Optional, Sequence

from yatt.core.errors import InputError
from yatt.core.plan import Experiment
from yatt.core.roles import Mode
from yatt.core.costmodel import CostModel
from yatt.core.trace import SampleRecord

from . import idle
from .candidate import Progress, SearchResult, SplitReport, shortlist
from .fullsize import FullSize, full_space_size, slice_experiment, slice_factor
from .refine import SplitRefinement
from .simjobs import Evaluator, reference_layout, reseed_many
from .space import Space, async_splits, partial_splits, placement_space
from .splitsearch import coordinate_descent, local_split, search_split
from .why_pp import trainer_note


@dataclass(frozen=True)
class _Found:
    """What the direct search found: every evaluated candidate and how splits were searched."""

    evaluator: "Evaluator"
    reports: tuple[SplitReport, ...]
    space_size: int


def _search_direct(exp: Experiment, cost: CostModel, space: Space, exhaustive: bool,
                   progress: Optional[Progress], recorded: Optional[Sequence[SampleRecord]],
                   keep: int = 0) -> _Found:
    ev = Evaluator(exp, cost, progress, recorded, keep=keep)
    has_genrm = exp.genrm is not None and bool(space.genrm_tps)
    gtps = space.genrm_tps if has_genrm else (1,)
    layouts = list(space.trainer_layouts)
    modes = exp.search.modes
    space_size = 0
    reports: list[SplitReport] = []
    best = (space.rollout_tps[0], gtps[0], layouts[0])
    colocate = Mode.COLOCATE in modes or not has_genrm

    if colocate:
        space_size += len(space.rollout_tps) * len(gtps) * len(layouts)
        best = coordinate_descent(lambda k: ev((Mode.COLOCATE, 0, k[0], k[1], *k[2], 0, 0)),
                                  [list(space.rollout_tps), list(gtps), layouts], exhaustive)
    if Mode.PARTIAL in modes and has_genrm:
        space_size += sum(len(partial_splits(exp, r, g)) for r in space.rollout_tps
                          for g in gtps) * len(layouts)
        g_total = exp.cluster.num_gpus
        memo: dict[tuple[int, int, tuple[int, int]], tuple[float, int]] = {}
        anchor: list[float] = []  # rollout fraction of the first full split search

        def best_split(rtp: int, gtp: int, lay: tuple[int, int]) -> float:
            """Best partial step time for a (rollout TP, GenRM TP, trainer layout). The
            first gets the guarded ternary search; later ones hill-climb from the first
            one's rollout fraction."""
            if (rtp, gtp, lay) not in memo:
                splits = partial_splits(exp, rtp, gtp)
                if not splits:
                    memo[(rtp, gtp, lay)] = (math.inf, 0)
                else:
                    f = lambda r: ev((Mode.PARTIAL, r, rtp, gtp, *lay, 0, 0))  # noqa: E731
                    if exhaustive or not anchor:
                        r, uni, method, calls = search_split(f, splits, exhaustive=exhaustive)
                        anchor.append(r / g_total)
                    else:
                        r, uni, method, calls = local_split(f, splits, anchor[0])
                    reports.append(SplitReport(rtp, gtp, len(splits), calls, uni, method, r))
                    memo[(rtp, gtp, lay)] = (f(r), r)
            return memo[(rtp, gtp, lay)][0]

        if exhaustive or colocate:
            for lay in (layouts if exhaustive else [best[2]]):
                coordinate_descent(lambda k, lay=lay: best_split(k[0], k[1], lay),
                                   [list(space.rollout_tps), list(gtps)], exhaustive,
                                   start=(best[0], best[1]))
        else:  # no full-colocate search chose the trainer layout: search it here
            coordinate_descent(lambda k: best_split(*k), [list(space.rollout_tps), list(gtps), layouts],
                               False, start=best)
    if Mode.ASYNC in modes:
        space_size += _search_async(exp, ev, space, reports, exhaustive)
    if not ev.cache:
        raise InputError("no placement to simulate: search.modes allows none that apply "
                         f"(modes: {[m.value for m in modes]}, GenRM: {bool(exp.genrm)})")
    return _Found(ev, tuple(reports), space_size)


def _search_async(exp: Experiment, ev: "Evaluator", space: Space, reports: list[SplitReport],
                  exhaustive: bool) -> int:
    """Async candidates into `ev` (see the module docstring); returns how many placements
    the async space holds."""
    n = exp.cluster.num_gpus
    has_genrm = exp.genrm is not None and bool(space.genrm_tps)
    gtps = space.genrm_tps if has_genrm else (1,)
    ks = tuple(dict.fromkeys(exp.search.staleness_choices))
    done = list(ev.cache.values())
    start = min(done, key=lambda c: (c.step_times[0], c.key)).key if done else None
    rtp0 = start[2] if start else space.rollout_tps[0]
    gtp0 = start[3] if start else gtps[0]
    layouts = list(space.trainer_layouts)
    share: Optional[float] = None
    if has_genrm:
        part = [c for c in done if c.plan.mode is Mode.PARTIAL]
        best_part = min(part, key=lambda c: (c.step_times[0], c.key)) if part else None
        share = best_part.key[1] / n if best_part else 0.5

    def splits(rtp: int, lay: tuple[int, int], sh: Optional[float]) -> list[tuple[int, int]]:
        ref = reference_layout(exp, rtp, *lay)
        return async_splits(exp, rtp, gtp0, lay, ref[0], sh)

    # the trainer layout: the other modes' best where it fits on some async share, else
    # the first that does
    lay0 = next((lay for lay in ([start[4:6]] if start else []) + layouts
                 if splits(rtp0, lay, share)), None)
    if lay0 is None and share is not None:   # no devices for a GenRM apart: on the rollout's
        share = None
        lay0 = next((lay for lay in ([start[4:6]] if start else []) + layouts
                     if splits(rtp0, lay, share)), None)
    size = sum(len(splits(r, lay, share)) for r in space.rollout_tps for lay in layouts) * len(ks)
    if lay0 is None:
        return size
    anchor: list[float] = []
    memo: dict[tuple[int, int], float] = {}

    def best_split(rtp: int, k: int) -> float:
        if (rtp, k) not in memo:
            sp = splits(rtp, lay0, share)
            if not sp:
                memo[(rtp, k)] = math.inf
                return math.inf
            d_list = [r + g for r, g in sp]
            by_d = dict(zip(d_list, sp))

            def f(d: int) -> float:
                r, g = by_d[d]
                return ev((Mode.ASYNC, r, rtp, gtp0, *lay0, g, k))
            if exhaustive or not anchor:
                d, uni, method, calls = search_split(f, d_list, exhaustive=exhaustive)
                anchor.append(d / n)
            else:
                d, uni, method, calls = local_split(f, d_list, anchor[0])
            reports.append(SplitReport(rtp, gtp0, len(sp), calls, uni, method, by_d[d][0],
                                       mode=Mode.ASYNC, staleness=k, trainer_devices=n - d))
            memo[(rtp, k)] = f(d)
        return memo[(rtp, k)]

    best_split(rtp0, ks[0])
    rtp = coordinate_descent(lambda x: best_split(x[0], ks[0]), [list(space.rollout_tps)],
                             exhaustive, start=(rtp0,))[0]
    for k in ks[1:]:
        best_split(rtp, k)
    if has_genrm:  # the GenRM on the rollout's devices, at the best async split so far
        best = min((c for c in ev.cache.values() if c.plan.mode is Mode.ASYNC),
                   key=lambda c: (c.step_times[0], c.key), default=None)
        if best is not None:
            d = best.key[1] + best.key[6]
            if (d, 0) in splits(best.key[2], lay0, None):
                ev((Mode.ASYNC, d, best.key[2], gtp0, *lay0, 0, best.key[7]))
    return size


def placeable_space(exp: Experiment) -> Space:
    """The placement space; InputError, naming the field to change, when it is empty."""
    space = placement_space(exp)
    if space.problems:
        raise InputError("cannot place this experiment: " + "; ".join(space.problems),
                         field=space.problem_field)
    return space


def search(exp: Experiment, cost: CostModel, *, top: int = 5, seeds: Optional[int] = None,
           exhaustive: bool = False, progress: Optional[Progress] = None,
           recorded: Optional[Sequence[SampleRecord]] = None) -> SearchResult:
    """Rank feasible placements of `exp` by simulated step time.

    Large clusters (more than 2 x SLICE_GPUS devices, not exhaustive, not replaying) are
    searched on a slice (`slice_experiment`): same per-engine load, ~1/factor the
    simulation cost. The slice's best placements are then taken back to full size
    (`FullSize`): each partial split refined at full resolution with the fluid model
    (`yatt.sim.fluid`, `refine`), the finalists simulated at full size within
    SIM_BUDGET_SAMPLES and priced by the fluid model beyond it; `note` says which.

    recorded: replay these samples' lengths (from a trace) instead of sampling the
    workload; every recorded step is simulated and the mean step time ranks.
    """
    t0 = time.perf_counter()
    space = placeable_space(exp)
    n_seeds = seeds or exp.search.seeds
    factor = slice_factor(exp, exhaustive, recorded is not None)
    if factor == 1:
        found = _search_direct(exp, cost, space, exhaustive, progress, recorded, keep=top)
        ev = found.evaluator
        short = shortlist(list(ev.cache.values()), top)
        final = reseed_many(exp, cost, short, n_seeds, progress, ev.sims, recorded)
        sims = ev.sims + sum(len(c.step_times) - 1 for c in final)
        slice_note = ""
        origin = {c.key: c.key for c in final}
        refinements: tuple[SplitRefinement, ...] = ()
    else:
        small = slice_experiment(exp, factor)
        if Mode.ASYNC in small.search.modes:   # the fluid model prices no async step
            modes = tuple(m for m in small.search.modes if m is not Mode.ASYNC)
            small = replace(small, search=replace(small.search, modes=modes or (Mode.COLOCATE,)))
        found = _search_direct(small, cost, placement_space(small), False, progress, None,
                               keep=min(top, 2))
        short = shortlist(list(found.evaluator.cache.values()), min(top, 2))
        full = FullSize(exp, cost, factor, n_seeds, progress, found.evaluator.sims)
        final, origin, refinements = full.run(short)
        sims = found.evaluator.sims + full.sims
        c = small.cluster
        slice_note = (f"searched on a 1/{factor} slice ({c.num_gpus} GPUs, "
                      f"{small.workload.prompts_per_step} prompts); " + full.note)
        if Mode.ASYNC in exp.search.modes:
            slice_note += ("; async not searched (the fluid model that places splits at full "
                           "size prices synchronous steps only)")
    final.sort(key=lambda c: (c.mean, c.key))
    best = final[0].key
    tried = {c.key[4:6]: c.step_times[0] for c in found.evaluator.cache.values()
             if c.key[:4] == origin[best][:4] and c.key[6:] == origin[best][6:]}
    return SearchResult(tuple(final), space, sims, found.space_size if factor == 1 else
                        full_space_size(exp, space), found.reports, time.perf_counter() - t0,
                        slice_note, trainer_note(exp, space, final[0].plan, tried), refinements,
                        idle.idle_note(final[0].trace, cost))
