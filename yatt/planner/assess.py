"""Score one given placement, and say how far it is from the best one found and why.

Why: "how fast is MY placement?" is the first question of a user who already runs one.
The given plan is simulated over the same seeds as the search's shortlist, so its step
time is comparable, and the gap is explained from the two simulated timelines: which
phases take longer, how much model switching and idle device time each plan has.
This module also turns a simulated candidate into the `predicted:` section of plan.yaml.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Optional

from yatt.core.costmodel import CostModel
from yatt.core.plan import Plan
from yatt.core.prediction import PhaseSeconds, Prediction, RoleMemory
from yatt.core.roles import Mode, Phase, Role
from yatt.core.trace import Trace
from yatt.core.version import yatt_version
from yatt.sim.metrics import summarize
from yatt.sim.simulate import simulate

from .explain import role_memory, timeline_facts
from .placement_text import placement_text
from .candidate import Candidate, Key, Progress, SeedRun, sim_steps


def plan_key(plan: Plan) -> Key:
    """The search's key for a plan: mode, rollout devices (0 in colocate), rollout, GenRM
    and trainer TP, trainer PP, async GenRM devices (0: none, or on the rollout's) and
    max_staleness (0 unless async)."""
    r = len(plan.placement(Role.ROLLOUT).devices) if plan.mode is not Mode.COLOCATE else 0
    g = plan.placement(Role.GENRM).tp if plan.has(Role.GENRM) else 1
    t = plan.placement(Role.TRAINER)
    asy = plan.mode is Mode.ASYNC
    g_dev = (len(plan.placement(Role.GENRM).devices)
             if asy and plan.has(Role.GENRM) and not plan.genrm_shares_rollout else 0)
    return (plan.mode, r, plan.placement(Role.ROLLOUT).tp, g, t.tp, t.pp, g_dev,
            plan.max_staleness if asy else 0)


def score_plan(plan: Plan, cost: CostModel, seeds: int,
               progress: Optional[Progress] = None) -> Candidate:
    """Simulate `plan` on seeds 0..seeds-1 (as many steps as the search does)."""
    runs, first = [], None
    plan = dataclasses.replace(plan, predicted=None)  # a prediction is no input to the simulator
    for s in range(seeds):
        trace = simulate(plan, plan.experiment.workload, cost, seed=s, steps=sim_steps(plan))
        st = summarize(trace)
        runs.append(SeedRun.of(trace, st))
        if first is None:
            first = (st, trace)
        if progress:
            progress(s + 1, "simulating the given placement")
    assert first is not None
    return Candidate(plan_key(plan), plan, tuple(runs), first[0], first[1])


def _union(ivs: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(ivs):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def phase_seconds(trace: Trace) -> dict[Phase, float]:
    """Per phase: seconds per step during which it runs on some device (the union of its
    spans), averaged over the trace's steps."""
    ivs: dict[tuple[int, Phase], list[tuple[float, float]]] = defaultdict(list)
    for s in trace.spans:
        ivs[(s.step, s.phase)].append((s.start_s, s.end_s))
    steps = max(1, len({s.step for s in trace.spans}))
    out: dict[Phase, float] = defaultdict(float)
    for (_, ph), v in ivs.items():
        out[ph] += _union(v) / steps
    return {ph: out[ph] for ph in Phase if ph in out}


def prediction(cand: Candidate, cost_label: str) -> Prediction:
    """The `predicted:` section for a simulated candidate."""
    plan = cand.plan
    cap = plan.cluster.gpu.hbm_bytes
    mem = role_memory(plan)
    return Prediction(
        step_s=round(cand.mean, 4), step_s_std=round(cand.spread, 4), seeds=len(cand.step_times),
        samples_per_s=round(cand.samples_per_s, 4), tokens_per_s=round(cand.tokens_per_s, 2),
        gpu_hours_per_step=round(plan.cluster.num_gpus * cand.mean / 3600.0, 6),
        phases=tuple(PhaseSeconds(ph, round(s, 4)) for ph, s in phase_seconds(cand.trace).items()),
        memory=tuple(RoleMemory(p.role, round(mem[p.role] / 1e9, 3), round(cap / 1e9, 3))
                     for p in plan.placements),
        cost_model=cost_label, yatt_version=yatt_version())


def with_prediction(cand: Candidate, cost_label: str) -> Plan:
    return dataclasses.replace(cand.plan, predicted=prediction(cand, cost_label))


# What the gap explanation compares, per step: (label, phases).
GENERATION = "generation (rollout + GenRM)"
_PARTS: tuple[tuple[str, tuple[Phase, ...]], ...] = (
    (GENERATION, (Phase.ROLLOUT, Phase.GENRM)),
    ("model switching", (Phase.OFFLOAD, Phase.RELOAD)),
    ("reference log-probs", (Phase.REF_LOGPROB,)),
    ("old log-probs", (Phase.OLD_LOGPROB,)),
    ("training", (Phase.TRAIN,)),
    ("weight sync", (Phase.WEIGHT_SYNC,)),
)


def union_seconds(trace: Trace, phases: tuple[Phase, ...]) -> float:
    """Seconds per step during which any of `phases` runs on some device."""
    ivs: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for s in trace.spans:
        if s.phase in phases:
            ivs[s.step].append((s.start_s, s.end_s))
    steps = max(1, len({s.step for s in trace.spans}))
    return sum(_union(v) for v in ivs.values()) / steps


def step_parts(trace: Trace) -> dict[str, float]:
    """Seconds per step of each part of `_PARTS`."""
    return {label: union_seconds(trace, phases) for label, phases in _PARTS}


def same_placement(a: Plan, b: Plan) -> bool:
    strip = lambda p: dataclasses.replace(p, predicted=None)  # noqa: E731
    return strip(a) == strip(b)


def gap_text(given: Candidate, best: Candidate) -> str:
    """How the given placement compares with the best found, in one or two sentences."""
    g_label, b_label = placement_text(given.plan), placement_text(best.plan)
    if same_placement(given.plan, best.plan):
        return (f"your placement {g_label} is the best one the search found "
                f"({given.mean:.1f} s/step).")
    gap = given.mean - best.mean
    rel = gap / best.mean * 100 if best.mean > 0 else 0.0
    if gap <= 0:
        return (f"your placement {g_label} ({given.mean:.1f} s/step) is {-rel:.1f}% faster than "
                f"the best the search found ({b_label}, {best.mean:.1f} s): the search samples "
                "the split and TPs, and missed this one; prefer yours.")
    pg, pb = step_parts(given.trace), step_parts(best.trace)
    deltas = sorted(((pg.get(k, 0.0) - pb.get(k, 0.0), k) for k, _ in _PARTS), reverse=True)
    bits = [f"{k} {pg.get(k, 0.0):.1f} s vs {pb.get(k, 0.0):.1f} s" for d, k in deltas
            if d > max(0.05, 0.02 * gap)][:3]
    fg, fb = timeline_facts(given.trace), timeline_facts(best.trace)
    if best.plan.mode is Mode.PARTIAL and fb.overlap_s > fg.overlap_s + 0.05:
        bits.append(f"the best overlaps {fb.overlap_s:.1f} s of judging with the rollout tail "
                    f"(yours: {fg.overlap_s:.1f} s)")
    bits.append(f"idle device time {given.bubble * 100:.0f}% vs {best.bubble * 100:.0f}%")
    return (f"your placement {g_label} takes {given.mean:.1f} s/step, {rel:.1f}% ({gap:.1f} s) "
            f"slower than the best found, {b_label} ({best.mean:.1f} s): " + "; ".join(bits) + ".")
