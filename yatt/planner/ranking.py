"""The ranking as flat rows: one column per role field, plus times, throughput and cost.

Why: ranking.csv, the JSON summary and `PlanResult.ranking` (a DataFrame) are the same
table for scripts; building the rows once keeps them equal. A placement is spread over
columns (`rollout_devices`, `rollout_tp`, ...) so a script never parses the label.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Optional, Sequence

from yatt.core.plan import Plan
from yatt.core.roles import Role
from yatt.core.safeio import atomic_write

from .costs import Pricing, cost_view
from .explain import peak_memory
from .placement_text import placement_text
from .candidate import Candidate

ROLES = (Role.ROLLOUT, Role.GENRM, Role.TRAINER, Role.REFERENCE)


def device_ranges(devices: Sequence[int]) -> str:
    """'0-3 8-11' for [0, 1, 2, 3, 8, 9, 10, 11]."""
    out, ds = [], sorted(devices)
    i = 0
    while i < len(ds):
        j = i
        while j + 1 < len(ds) and ds[j + 1] == ds[j] + 1:
            j += 1
        out.append(f"{ds[i]}-{ds[j]}" if j > i else str(ds[i]))
        i = j + 1
    return " ".join(out)


def role_columns(plan: Plan) -> dict[str, Any]:
    """`<role>_devices`, `_tp`, `_pp`, `_dp`, `_device_ids` for every role (blank when the
    plan does not place the role)."""
    cols: dict[str, Any] = {}
    for role in ROLES:
        p = plan.placement(role) if plan.has(role) else None
        r = role.value
        cols[f"{r}_devices"] = len(p.devices) if p else None
        cols[f"{r}_tp"] = p.tp if p else None
        cols[f"{r}_pp"] = p.pp if p else None
        cols[f"{r}_dp"] = p.dp if p else None
        cols[f"{r}_device_ids"] = device_ranges(p.devices) if p else None
    return cols


def candidate_row(c: Candidate, rank: Optional[int], source: str,
                  pricing: Optional[Pricing] = None) -> dict[str, Any]:
    pricing = pricing or Pricing()
    plan = c.plan
    peak, cap = peak_memory(plan)
    cv = cost_view(plan.cluster.num_gpus, c.mean, c.samples_per_s, pricing)
    row: dict[str, Any] = {"rank": rank, "source": source, "mode": plan.mode.value,
                           "placement": placement_text(plan), "gpus": plan.cluster.num_gpus}
    row.update(role_columns(plan))
    row.update({
        "step_s_mean": round(c.mean, 4), "step_s_spread": round(c.spread, 4),
        "seeds": len(c.step_times),
        "samples_per_s": round(c.samples_per_s, 4),
        "samples_per_s_per_gpu": round(cv.samples_per_s_per_gpu, 5),
        "tokens_per_s": round(c.tokens_per_s, 1), "bubble": round(c.bubble, 4),
        "peak_gb": round(peak / 1e9, 2), "capacity_gb": round(cap / 1e9, 2),
        "gpu_hours_per_step": round(cv.gpu_hours_per_step, 5),
        "steps": pricing.steps, "gpu_hours_run": round(cv.gpu_hours_run, 4),
        "dollars_run": None if cv.dollars_run is None else round(cv.dollars_run, 2),
    })
    return row


def ranking_rows(ranked: Sequence[Candidate], given: Optional[Candidate] = None,
                 pricing: Optional[Pricing] = None) -> list[dict[str, Any]]:
    """The searched candidates in rank order, then the given placement (rank blank,
    source 'given') when there is one."""
    rows = [candidate_row(c, i, "search", pricing) for i, c in enumerate(ranked, 1)]
    if given is not None:
        rows.append(candidate_row(given, None, "given", pricing))
    return rows


def write_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    with atomic_write(path, newline="") as f:   # never through a link, never half a file
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["rank"])
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return path
