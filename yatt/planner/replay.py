"""Replay a recorded trace: re-simulate its steps with the recorded sample lengths.

Why: a trace pins down the one thing a simulation otherwise guesses -- what the model
actually generated (lengths, resampling rounds, which groups were dropped). Replaying it
under the recorded plan measures the cost model against reality, phase by phase;
replaying it under another mode, cluster or size answers capacity-planning questions
("twice the GPUs? the other mode?") with the run's own workload instead of a synthetic one.

Steps are replayed by position: recorded step ids (which may start anywhere) are mapped
to 0..n-1 for the simulator and mapped back in the predicted trace. Each simulated step
depends only on its own samples, so steps can also be replayed in subsets.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from yatt.planner.sizes import resize
from yatt.core.costmodel import CostModel
from yatt.core.errors import InputError
from yatt.core.plan import Experiment, Plan
from yatt.core.roles import Mode, Phase, Role
from yatt.core.specs import ClusterSpec
from yatt.core.trace import SampleRecord, Trace
from yatt.sim.metrics import StepStats, summarize
from yatt.sim.simulate import simulate

from .search import search

CostFor = Callable[[Experiment], CostModel]
Progress = Callable[[int, str], None]


def sample_steps(trace: Trace) -> list[int]:
    """Recorded step ids that have samples (the ones a replay can re-simulate), sorted."""
    steps = sorted({s.step for s in trace.samples})
    if not steps:
        raise InputError("the trace has no sample records to replay; allowed: a trace with "
                         "`sample` lines (the per-sample lengths)", field="sample")
    return steps


def renumbered(trace: Trace, steps: Sequence[int]) -> tuple[SampleRecord, ...]:
    """The samples of `steps`, with step ids replaced by their position in `steps`."""
    pos = {s: i for i, s in enumerate(steps)}
    return tuple(dataclasses.replace(s, step=pos[s.step]) for s in trace.samples if s.step in pos)


def simulate_steps(trace: Trace, plan: Plan, cost: CostModel, steps: Sequence[int]) -> Trace:
    """Simulate the recorded `steps` of `trace` under `plan`; spans/samples keep recorded ids."""
    sim = simulate(plan, plan.experiment.workload, cost, seed=trace.meta.seed, steps=len(steps),
                   recorded=renumbered(trace, steps))
    back = list(steps)
    spans = tuple(dataclasses.replace(s, step=back[s.step]) for s in sim.spans)
    samples = tuple(dataclasses.replace(s, step=back[s.step]) for s in sim.samples)
    return Trace(sim.meta, samples, spans)


@dataclass(frozen=True)
class PhaseRow:
    """Mean busy seconds per step of one (phase, role): recorded against predicted."""

    phase: Phase
    role: Role
    recorded_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        """Relative error of the prediction (NaN when nothing was recorded)."""
        return (self.predicted_s - self.recorded_s) / self.recorded_s if self.recorded_s > 0 else float("nan")


def phase_rows(recorded: Trace, predicted: Trace, steps: Optional[Sequence[int]] = None) -> list[PhaseRow]:
    """Per (phase, role), mean over `steps` of the union busy time, both traces."""
    keep = set(steps) if steps is not None else set(recorded.steps())
    n = max(1, len(keep))
    rec, pred = recorded.phase_role_busy(), predicted.phase_role_busy()
    keys = sorted({(p, r) for (s, p, r) in list(rec) + list(pred) if s in keep},
                  key=lambda k: (list(Phase).index(k[0]), list(Role).index(k[1])))
    out = []
    for ph, role in keys:
        a = sum(v for (s, p, r), v in rec.items() if s in keep and p is ph and r is role) / n
        b = sum(v for (s, p, r), v in pred.items() if s in keep and p is ph and r is role) / n
        out.append(PhaseRow(ph, role, a, b))
    return out


@dataclass(frozen=True)
class Replay:
    """The recorded trace and its re-simulation under the recorded plan."""

    recorded: Trace
    predicted: Trace
    steps: tuple[int, ...]
    recorded_stats: StepStats
    predicted_stats: StepStats

    @property
    def step_error(self) -> float:
        a, b = self.recorded_stats.step_time_mean, self.predicted_stats.step_time_mean
        return (b - a) / a if a > 0 else float("nan")

    def median_steps(self) -> tuple[float, float]:
        """(recorded, predicted) median step time over the replayed steps: one step that
        another tenant of a shared host slowed moves the mean, not the median."""
        def med(t: Trace) -> float:
            times = t.step_times()
            xs = [times[k] for k in self.steps if k in times]
            return statistics.median(xs) if xs else float("nan")
        return med(self.recorded), med(self.predicted)

    def phases(self) -> list[PhaseRow]:
        return phase_rows(self.recorded, self.predicted, self.steps)


CALIBRATE_ABOVE = 0.15  # per-phase median |error| above which replay suggests calibrating


def median_phase_error(rep: "Replay") -> float:
    """Median |relative error| over the (phase, role) rows that recorded any time; NaN if none."""
    errs = sorted(abs(r.error) for r in rep.phases() if r.error == r.error)
    if not errs:
        return float("nan")
    m = len(errs) // 2
    return errs[m] if len(errs) % 2 else (errs[m - 1] + errs[m]) / 2


def _only_steps(trace: Trace, steps: Sequence[int]) -> Trace:
    keep = set(steps)
    return Trace(trace.meta, tuple(s for s in trace.samples if s.step in keep),
                 tuple(s for s in trace.spans if s.step in keep))


def replay(trace: Trace, cost: CostModel, plan: Optional[Plan] = None,
           warmup: int = 0) -> Replay:
    """Re-simulate every step that has samples, under `plan` (default: the recorded one),
    but the first `warmup` of them (a measured run's step 0 pays one-off process warm-up
    that the simulator does not model; kept where nothing else would remain)."""
    steps = sample_steps(trace)
    steps = steps[warmup:] if len(steps) > warmup else steps
    pred = simulate_steps(trace, plan or trace.meta.plan, cost, steps)
    rec = _only_steps(trace, steps)
    return Replay(rec, pred, tuple(steps), summarize(rec), summarize(pred))


@dataclass(frozen=True)
class WhatIf:
    """One alternative: a placement for a cluster, replayed on every recorded step."""

    label: str
    gpus: int
    gpu: str
    mode: Mode
    plan: Plan
    stats: StepStats
    speedup: float  # replayed recorded-plan step time / this step time

    @property
    def step_s(self) -> float:
        return self.stats.step_time_mean


def what_if(trace: Trace, base: Replay, cost_for: CostFor, *, sizes: Sequence[int],
            modes: Sequence[Mode], cluster: Optional[ClusterSpec] = None,
            progress: Optional[Progress] = None) -> list[WhatIf]:
    """Best placement per mode for each cluster size, replayed on the recorded steps.

    The search ranks placements on the last recorded step (the longest responses when they
    grow over training); each winner is then replayed on every step. Speed-ups compare with
    the *replayed* recorded plan, so a constant cost-model bias cancels."""
    exp0 = trace.meta.plan.experiment
    steps = list(base.steps)
    last = renumbered(trace, steps[-1:])
    ref = base.predicted_stats.step_time_mean
    rows: list[WhatIf] = []
    for g in sizes:
        exp = resize(exp0, g, cluster)
        exp = dataclasses.replace(exp, search=dataclasses.replace(exp.search, modes=tuple(modes)))
        cost = cost_for(exp)
        try:
            res = search(exp, cost, top=1, seeds=1, recorded=last, progress=progress)
        except InputError as e:
            raise InputError(f"{g} x {exp.cluster.gpu.name}: {e.message}", field="--gpus") from None
        for mode in modes:
            cand = res.best_of(mode)
            if cand is None:
                continue
            st = summarize(simulate_steps(trace, cand.plan, cost, steps))
            rows.append(WhatIf(f"best {mode.value}", g, exp.cluster.gpu.name, mode, cand.plan, st,
                               ref / st.step_time_mean if st.step_time_mean > 0 else float("nan")))
    return rows
