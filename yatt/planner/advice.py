"""One planning session, as `yatt plan` and `yatt.plan()` share it: search, optionally score
a given placement against the best, price the result, and sweep cluster sizes.

Why: the command line and the Python API must give the same numbers. Both call
`plan_experiment`, and both read the answer from `PlanResult`, whose repr stays one line
(a SearchResult holds every simulated trace: megabytes).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

from yatt.core.costmodel import CostModel
from yatt.core.errors import InputError
from yatt.core.plan import Experiment, Plan
from yatt.core.roles import Mode
from yatt.core.schema import to_dict
from yatt.core.trace import Trace

from .assess import gap_text, score_plan, with_prediction
from .costs import Pricing, cost_view
from .emit import Emission, emit
from .frameworks import Framework, parse_framework
from .asyncnote import mode_verdicts
from .placement_text import placement_text
from .ranking import device_ranges, ranking_rows
from .candidate import Candidate, Progress, SearchResult
from .search import search
from .sizes import resize

SUMMARY_SCHEMA = "yatt.plan-summary/1"
CostFor = Callable[[Experiment], CostModel]


@dataclass(frozen=True)
class ScalingRow:
    """The best placement of one mode on one cluster size."""

    gpus: int
    mode: Mode
    candidate: Candidate

    @property
    def step_s(self) -> float:
        return self.candidate.mean

    @property
    def samples_per_s(self) -> float:
        return self.candidate.samples_per_s

    def as_dict(self, pricing: Pricing) -> dict[str, Any]:
        cv = cost_view(self.gpus, self.step_s, self.samples_per_s, pricing)
        return {"gpus": self.gpus, "mode": self.mode.value,
                "placement": placement_text(self.candidate.plan),
                "step_s": round(self.step_s, 4), "samples_per_s": round(self.samples_per_s, 4),
                "samples_per_s_per_gpu": round(cv.samples_per_s_per_gpu, 5),
                "gpu_hours_per_step": round(cv.gpu_hours_per_step, 5),
                "gpu_hours_run": round(cv.gpu_hours_run, 4),
                "dollars_run": None if cv.dollars_run is None else round(cv.dollars_run, 2)}

    def __repr__(self) -> str:
        return f"ScalingRow({self.gpus} GPUs, {placement_text(self.candidate.plan)}, {self.step_s:.1f} s/step)"


@dataclass(frozen=True, repr=False)
class PlanResult:
    """What planning an experiment found.

    best       the fastest placement found (a Candidate: .plan, .mean, .spread, .samples_per_s, .trace)
    given      the placement you asked about, simulated the same way (or None)
    ranking    a pandas DataFrame, one row per placement (see `ranking_rows`)
    scaling    the best placement per mode per cluster size (with `gpus=`)
    """

    experiment: Experiment
    search: SearchResult
    given: Optional[Candidate]
    cost_label: str
    pricing: Pricing
    cost: CostModel
    scaling: tuple[ScalingRow, ...] = ()
    scaling_problems: tuple[str, ...] = ()

    @property
    def best(self) -> Candidate:
        return self.search.best

    @property
    def ranked(self) -> tuple[Candidate, ...]:
        return self.search.ranked

    def rows(self) -> list[dict[str, Any]]:
        """The ranking as plain dicts (the rows of ranking.csv)."""
        return ranking_rows(self.search.ranked, self.given, self.pricing)

    @property
    def ranking(self):
        """The ranking as a pandas DataFrame (imported on first use)."""
        import pandas as pd

        return pd.DataFrame(self.rows())

    def timeline(self, given: bool = False) -> Trace:
        """The simulated trace (seed 0) of the best placement, or of the given one."""
        if given:
            if self.given is None:
                raise InputError("no given placement; pass placement= to yatt.plan", field="given")
            return self.given.trace
        return self.best.trace

    def best_plan(self) -> Plan:
        """The best plan with its `predicted:` section (what plan.yaml holds)."""
        return with_prediction(self.best, self.cost_label)

    def given_plan(self) -> Optional[Plan]:
        return None if self.given is None else with_prediction(self.given, self.cost_label)

    def why(self) -> Optional[str]:
        """Why the best beats the best of the other modes (None with one mode)."""
        return " ".join(mode_verdicts(self.search)) or None

    def gap(self) -> Optional[str]:
        """How the given placement compares with the best, and why (None without one)."""
        return None if self.given is None else gap_text(self.given, self.best)

    def emit(self, framework: Union[Framework, str], progress: Optional[Progress] = None) -> Emission:
        """The best placement as `framework`'s settings (verl, openrlhf or nemo-rl); when the
        framework cannot express it, its nearest layout, simulated (`yatt.planner.emit`)."""
        fw = framework if isinstance(framework, Framework) else parse_framework(framework)
        sync = next((c for c in self.search.ranked if c.plan.mode is not Mode.ASYNC), None)
        return emit(fw, self.best, self.cost, len(self.best.step_times), progress,
                    self.search.best_of(Mode.COLOCATE), sync)

    def summary(self) -> dict[str, Any]:
        """Everything a script needs, as plain JSON-able data (`yatt plan --json`)."""
        c = self.experiment.cluster
        best = self.best
        cv = cost_view(c.num_gpus, best.mean, best.samples_per_s, self.pricing)
        out: dict[str, Any] = {
            "schema": SUMMARY_SCHEMA,
            "experiment": self.experiment.name,
            "cluster": {"gpus": c.num_gpus, "gpu": c.gpu.name, "nodes": c.nodes,
                        "gpus_per_node": c.gpus_per_node},
            "cost_model": self.cost_label,
            "best": _plan_entry(self.best_plan()),
            "why": self.why(),
            "given": None,
            "cost": {"steps": self.pricing.steps, "price_per_gpu_hour": self.pricing.price,
                     "gpu_hours_per_step": round(cv.gpu_hours_per_step, 5),
                     "gpu_hours_run": round(cv.gpu_hours_run, 4),
                     "hours_run": round(cv.hours_run, 4),
                     "dollars_run": None if cv.dollars_run is None else round(cv.dollars_run, 2)},
            "ranking": self.rows(),
            "scaling": [r.as_dict(self.pricing) for r in self.scaling],
            "search": {"simulations": self.search.simulations,
                       "placements": self.search.space_size,
                       "seconds": round(self.search.seconds, 2), "note": self.search.note,
                       "trainer_note": self.search.trainer_note},
        }
        if self.given is not None:
            g = self.given
            gp = self.given_plan()
            assert gp is not None
            out["given"] = {**_plan_entry(gp), "gap_s": round(g.mean - best.mean, 4),
                            "gap_pct": round((g.mean - best.mean) / best.mean * 100, 3)
                            if best.mean > 0 else None, "why": self.gap()}
        return out

    def __repr__(self) -> str:
        b = self.best
        given = ("" if self.given is None else
                 f", given={placement_text(self.given.plan)!r} {self.given.mean:.1f} s")
        return (f"PlanResult({self.experiment.name!r}, best={placement_text(b.plan)!r} "
                f"{b.mean:.1f}±{b.spread:.1f} s/step, {len(self.search.ranked)} ranked{given})")


def _plan_entry(plan: Plan) -> dict[str, Any]:
    d = to_dict(plan)
    return {"placement": placement_text(plan), "mode": plan.mode.value,
            "roles": [{"role": p.role.value, "devices": len(p.devices),
                       "device_ids": device_ranges(p.devices), "tp": p.tp, "pp": p.pp, "dp": p.dp}
                      for p in plan.placements],
            "predicted": d.get("predicted")}


def scaling(exp: Experiment, sizes: Sequence[int], cost_for: CostFor,
            progress_for: Optional[Callable[[int], Optional[Progress]]] = None,
            done: Optional[Callable[[], None]] = None) -> tuple[list[ScalingRow], list[str]]:
    """The best placement per mode on each cluster size; sizes that cannot be placed are
    reported, not fatal."""
    rows: list[ScalingRow] = []
    problems: list[str] = []
    for g in sizes:
        sub = resize(exp, g)
        prog = progress_for(g) if progress_for else None
        try:
            r = search(sub, cost_for(sub), top=1, progress=prog)
        except InputError as e:
            problems.append(f"{g} GPUs: {e.message}")
            continue
        finally:
            if done:
                done()
        for mode in Mode:
            c = r.best_of(mode)
            if c is not None:
                rows.append(ScalingRow(g, mode, c))
    return rows, problems


def plan_experiment(exp: Experiment, cost: CostModel, *, cost_label: str = "analytic defaults",
                    given: Optional[Plan] = None, top: int = 5, seeds: Optional[int] = None,
                    pricing: Optional[Pricing] = None, progress: Optional[Progress] = None) -> PlanResult:
    """Search `exp`'s placements; simulate `given` (if any) over the same number of seeds."""
    if given is not None and given.experiment != exp:
        given = dataclasses.replace(given, experiment=exp)
    res = search(exp, cost, top=top, seeds=seeds, progress=progress)
    g = None
    if given is not None:
        g = score_plan(given, cost, len(res.best.step_times), progress)
    return PlanResult(exp, res, g, cost_label, pricing or Pricing(), cost)


def with_scaling(result: PlanResult, rows: Sequence[ScalingRow], problems: Sequence[str]) -> PlanResult:
    return dataclasses.replace(result, scaling=tuple(rows), scaling_problems=tuple(problems))
