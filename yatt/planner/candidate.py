"""What a placement search produces: candidates (a placement and its simulated seeds), the
report of each split search, and the ranked result.

Why apart from the search: the ranking, the report, the advice and the emitted plan read
these without running a search.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from yatt.core.plan import Plan
from yatt.core.roles import Mode
from yatt.core.trace import SampleRecord, Trace
from yatt.sim.metrics import StepStats, steady_window

from .refine import SplitRefinement
from .space import Space

# mode, rollout devices (0 = all), rollout tp, genrm tp, trainer tp, trainer pp,
# GenRM devices (async with its own; else 0), max_staleness (async; else 0)
Key = tuple[Mode, int, int, int, int, int, int, int]


def async_steps(k: int) -> int:
    """Steps an async candidate is simulated over: the warm-up fill, then k + 1 steps so
    that the queue bound (rollout k steps ahead) is reached in the steady state."""
    return k + 2


def sim_steps(plan: Plan, recorded: Optional[Sequence[SampleRecord]] = None) -> int:
    """Steps one simulation of `plan` runs: every recorded step when replaying a trace,
    one for colocate and partial; for async, `async_steps` of the largest k it or its
    experiment's `search.staleness_choices` name, so every async candidate of a search
    averages the same steps (common random numbers)."""
    if recorded:
        return len({s.step for s in recorded})
    if plan.mode is not Mode.ASYNC:
        return 1
    return async_steps(max((plan.max_staleness,) + plan.experiment.search.staleness_choices))
Progress = Callable[[int, str], None]




@dataclass(frozen=True)
class SeedRun:
    """What one seed's simulation of a placement adds up to."""

    step_time: float        # mean step time over the simulated steps
    steps: int
    kept: int               # trained samples, all steps
    trained_tokens: int     # prompt + response tokens of the trained samples, all steps
    bubble: float           # idle fraction of device time

    @staticmethod
    def of(trace: Trace, stats: StepStats) -> "SeedRun":
        # the steps `stats` covers (async: its steady state, after the warm-up)
        window = steady_window(trace)
        first = window[2] if window else 0
        tokens = sum(s.prompt_tokens + s.response_tokens for s in trace.samples
                     if s.kept and s.step >= first)
        return SeedRun(stats.step_time_mean, stats.steps, stats.samples_kept, tokens,
                       stats.bubble_fraction)


@dataclass(frozen=True)
class Candidate:
    key: Key
    plan: Plan
    runs: tuple[SeedRun, ...]       # one per seed, seed 0 first
    stats: StepStats                # of the seed-0 simulation (the drawn timeline)
    trace: Optional[Trace]          # the seed-0 simulation (kept for shortlisted candidates)

    @property
    def step_times(self) -> tuple[float, ...]:
        return tuple(r.step_time for r in self.runs)

    @property
    def mean(self) -> float:
        return sum(self.step_times) / len(self.step_times)

    @property
    def spread(self) -> float:
        m = self.mean
        return math.sqrt(sum((t - m) ** 2 for t in self.step_times) / len(self.step_times))

    # Throughputs pool the same seeds as `mean`: what all seeds trained over all their step
    # time. Seeds draw the same lengths (and the same dropped groups) whatever the
    # placement, so throughput orders placements exactly as `mean` does.
    def _seconds(self) -> float:
        return sum(r.step_time * r.steps for r in self.runs)

    @property
    def samples_per_s(self) -> float:
        t = self._seconds()
        return sum(r.kept for r in self.runs) / t if t > 0 else float("nan")

    @property
    def tokens_per_s(self) -> float:
        t = self._seconds()
        return sum(r.trained_tokens for r in self.runs) / t if t > 0 else float("nan")

    @property
    def bubble(self) -> float:
        """Idle fraction of device time, mean over seeds."""
        return sum(r.bubble for r in self.runs) / len(self.runs)

    def __repr__(self) -> str:  # the trace holds every span: keep the repr one line
        return f"Candidate({self.plan.describe()!r}, {self.mean:.2f}±{self.spread:.2f} s/step)"


@dataclass(frozen=True)
class SplitReport:
    rollout_tp: int
    genrm_tp: int
    splits: int          # legal splits for this TP pair
    evaluated: int       # splits simulated
    unimodal: bool       # the coarse grid looked unimodal
    method: str          # "exhaustive" | "ternary" | "scan" | "local"
    best_rollout_devices: int
    mode: Mode = Mode.PARTIAL  # async: the split of generator and trainer devices
    staleness: int = 0         # async: the max_staleness searched
    trainer_devices: int = 0   # async: the best split's trainer devices

    def __post_init__(self) -> None:
        # "best" is a simulated split: at least one, and no more than there are
        assert 1 <= self.evaluated <= self.splits, self


@dataclass(frozen=True)
class SearchResult:
    ranked: tuple[Candidate, ...]
    space: Space
    simulations: int
    space_size: int
    split_reports: tuple[SplitReport, ...]
    seconds: float
    note: str = ""  # how the search was done, when it is not the plain direct search
    trainer_note: str = ""  # why the best plan's trainer runs a pipeline (`why_pp`)
    refinements: tuple[SplitRefinement, ...] = ()  # full-size split placements (sliced search)
    idle_note: str = ""  # why a side of the best plan waits (`idle`)

    @property
    def best(self) -> Candidate:
        return self.ranked[0]

    def best_of(self, mode: Mode) -> Optional[Candidate]:
        for c in self.ranked:
            if c.plan.mode is mode:
                return c
        return None

    def __repr__(self) -> str:
        return (f"SearchResult(best={self.best!r}, {len(self.ranked)} ranked, "
                f"{self.simulations} simulations)")


def shortlist(cands: Sequence[Candidate], top: int) -> list[Candidate]:
    """The best `top` candidates plus the best of each mode (so the comparison shows)."""
    ordered = sorted(cands, key=lambda c: (c.step_times[0], c.key))
    keep = ordered[:top]
    for mode in (Mode.COLOCATE, Mode.PARTIAL, Mode.ASYNC):
        bm = next((c for c in ordered if c.plan.mode is mode), None)
        if bm is not None and bm not in keep:
            keep.append(bm)
    return keep
