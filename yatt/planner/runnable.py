"""Plan an experiment for the executor: the planner's best placement that `yatt run` runs.

Why: `yatt run CONFIG`, `yatt.Trainer` and anything else that plans in order to execute
share this one path, so they can never disagree on which placement runs. The executor's
limits come from `yatt.core.runnable`.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from yatt.core.plan import Experiment
from yatt.core.roles import Mode
from yatt.core.runnable import executor_search

from .candidate import SearchResult
from .search import search


def plan_for_executor(exp: Experiment, cost, mode: Optional[Mode] = None, *, top: int = 3,
                      progress=None) -> SearchResult:
    """Search the placements the executor runs (optionally one mode only)."""
    s = exp.search if mode is None else dataclasses.replace(exp.search, modes=(mode,))
    s = executor_search(s)
    return search(dataclasses.replace(exp, search=s), cost, top=top, progress=progress)


def describe_choice(result: SearchResult) -> str:
    """One line: the chosen placement, its predicted step time, and the other mode's best."""
    best = result.best
    other = next((c for c in result.ranked if c.plan.mode is not best.plan.mode), None)
    return (f"planned: {best.plan.describe()} (predicted {best.mean:.2f} s/step"
            + (f"; best {other.plan.mode.value}: {other.mean:.2f} s" if other else "") + ")")
