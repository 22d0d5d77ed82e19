"""Tables `yatt plan` prints beyond the ranking: the given placement against the best, the
cost of a run, and the scaling sweep.

Why: kept apart from cli/plan.py so the ranking's own rendering stays small; everything
here reads a `PlanResult` and prints, nothing is computed that the JSON summary lacks.
"""
from __future__ import annotations

from typing import Optional

from rich.table import Table

from yatt.planner.advice import PlanResult
from yatt.planner.costs import cost_view, dollars, hours
from yatt.planner.explain import peak_memory
from yatt.planner.placement_text import placement_text
from yatt.planner.candidate import Candidate
from yatt.core.roles import Mode

from .common import shown


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f}"


def given_table(result: PlanResult) -> Table:
    """The given placement next to the best one found."""
    t = Table(title=f"Your placement against the best found (mean±std over "
                    f"{len(result.best.step_times)} seeds)", title_justify="left")
    for col in ("", "placement", "step s", "gap", "samples/s", "bubble%", "peak/cap GB"):
        t.add_column(col, justify="left" if col in ("", "placement") else "right")
    best, given = result.best, result.given
    assert given is not None
    for label, c in (("best found", best), ("yours", given)):
        peak, cap = peak_memory(c.plan)
        gap = "" if c is best else f"{(c.mean - best.mean) / best.mean * 100:+.1f}%"
        fits = "" if peak <= cap else " [red](does not fit)[/]"
        t.add_row(label, shown(placement_text(c.plan)), f"{c.mean:.1f}±{c.spread:.1f}", gap,
                  f"{c.samples_per_s:.2f}", f"{c.bubble * 100:.0f}",
                  f"{_gb(peak)}/{_gb(cap)}{fits}")
    return t


def cost_table(result: PlanResult) -> Table:
    """GPU-hours (and dollars) per step and per run for the best, the best of the other
    mode, and the given placement."""
    p = result.pricing
    run = f"{p.steps:,} step" + ("s" if p.steps != 1 else "")
    price = f", ${p.price:g} per GPU-hour" if p.price is not None else ""
    t = Table(title=f"Cost of a run ({run}{price}; --steps N, --price-per-gpu-hour X)",
              title_justify="left")
    cols = ["", "placement", "GPUs", "step s", "samples/s/GPU", "GPU-h/step", "GPU-h/run", "wall h/run"]
    if p.price is not None:
        cols += ["$/step", "$/run"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("", "placement") else "right")
    best = result.best
    others = [result.search.best_of(m) for m in Mode if m is not best.plan.mode]
    rows: list[tuple[str, Optional[Candidate]]] = [("best", best)]
    rows += [(f"best {o.plan.mode.value}", o) for o in others if o is not None]
    rows.append(("yours", result.given))
    for label, c in rows:
        if c is None:
            continue
        g = c.plan.cluster.num_gpus
        cv = cost_view(g, c.mean, c.samples_per_s, p)
        cells = [label, shown(placement_text(c.plan)), str(g), f"{c.mean:.1f}",
                 f"{cv.samples_per_s_per_gpu:.4f}", hours(cv.gpu_hours_per_step),
                 hours(cv.gpu_hours_run), hours(cv.hours_run)]
        if p.price is not None:
            cells += [dollars(cv.dollars_per_step), dollars(cv.dollars_run)]
        t.add_row(*cells)
    return t


def scaling_table(result: PlanResult) -> Table:
    """The --gpus sweep: best placement per mode per size, with per-GPU efficiency."""
    p = result.pricing
    t = Table(title="Scaling (best placement per mode and cluster size; predicted)",
              title_justify="left")
    cols = ["GPUs", "mode", "placement", "step s", "samples/s", "samples/s/GPU", "GPU-h/step"]
    if p.steps > 1:
        cols.append("GPU-h/run")
    if p.price is not None:
        cols.append("$/run")
    for col in cols:
        t.add_column(col, justify="left" if col in ("mode", "placement") else "right")
    for r in result.scaling:
        cv = cost_view(r.gpus, r.step_s, r.samples_per_s, p)
        cells = [str(r.gpus), r.mode.value, shown(placement_text(r.candidate.plan)), f"{r.step_s:.1f}",
                 f"{r.samples_per_s:.2f}", f"{cv.samples_per_s_per_gpu:.4f}",
                 hours(cv.gpu_hours_per_step)]
        if p.steps > 1:
            cells.append(hours(cv.gpu_hours_run))
        if p.price is not None:
            cells.append(dollars(cv.dollars_run))
        t.add_row(*cells)
    return t
