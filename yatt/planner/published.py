"""Predicted against published RL step times: `python -m yatt.planner.published > docs/published.md`.

Why: the cost model's defaults were fitted on kernels of one H200; whether whole RL steps
come out right at other scales, on other GPUs and in other frameworks is only known by
rebuilding published runs and predicting them. The registry
(`configs/published/published.yaml`) names each number's source and every setup detail
the source leaves out; each row's experiment lives next to it. This module simulates each
row's published placement (no search: the placement the authors ran) and renders the table,
so the document is regenerated, never edited, and a test keeps it current.
"""
from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Optional

from yatt.core.bundled import configs_dir
from yatt.core.config import load_experiment, read_yaml
from yatt.core.errors import InputError
from yatt.core.plan import Plan, RolePlacement
from yatt.core.roles import Mode, Phase, Role
from yatt.core.schema import from_dict, spec_field

from .assess import score_plan, union_seconds
from .costmodel import AnalyticCostModel
from .ranking import device_ranges
from .candidate import Candidate

SEEDS = 3
REGISTRY = "published/published.yaml"
GENERATION = (Phase.ROLLOUT, Phase.GENRM)
TRAINING = (Phase.REF_LOGPROB, Phase.OLD_LOGPROB, Phase.TRAIN)  # the trainer's own passes


class Confidence(str, Enum):
    HIGH = "H"    # the number and the setup are in the cited text
    MEDIUM = "M"  # the number is; some of the setup is assumed or from a secondary source
    LOW = "L"     # the per-step number is derived, and key setup is assumed


@dataclass(frozen=True)
class LayoutEntry:
    """One role on `count` consecutive devices from `first`."""

    role: Role = spec_field(help="the role")
    count: int = spec_field(ge=1, help="devices")
    first: int = spec_field(0, ge=0, help="first device id")
    tp: int = spec_field(1, ge=1, help="tensor-parallel size")
    pp: int = spec_field(1, ge=1, help="pipeline-parallel size")


@dataclass(frozen=True)
class PublishedPhases:
    generation_s: Optional[float] = spec_field(None, ge=0, help="published generation seconds per step")
    training_s: Optional[float] = spec_field(None, ge=0, help="published trainer seconds per step "
                                                              "(old log-probs + update)")


@dataclass(frozen=True)
class PublishedRow:
    id: str = spec_field(help="row name")
    config: str = spec_field(help="experiment YAML, relative to the registry")
    framework: str = spec_field(help="system and algorithm the number was measured with")
    mode: Mode = spec_field(help="yatt mode of the published placement")
    layout: tuple[LayoutEntry, ...] = spec_field(help="the published placement, role by role")
    published_s: float = spec_field(gt=0, help="published seconds per RL step")
    measure: str = spec_field(help="what the published number is")
    source: str = spec_field(help="where it is published (file and commit, or address)")
    confidence: Confidence = spec_field(help="H, M or L")
    assumptions: tuple[str, ...] = spec_field(help="setup details the source does not state")
    given: tuple[str, ...] = spec_field((), help="setup details the source states")
    phases: PublishedPhases = spec_field(PublishedPhases(), help="published per-phase seconds")
    series: str = spec_field("", help="rows of one scaling series share this name")


@dataclass(frozen=True)
class ExcludedRow:
    id: str = spec_field(help="what was left out")
    source: str = spec_field(help="where it is published")
    why: str = spec_field(help="why yatt cannot rebuild it honestly")


@dataclass(frozen=True)
class Registry:
    rows: tuple[PublishedRow, ...] = spec_field(help="rebuilt rows")
    excluded: tuple[ExcludedRow, ...] = spec_field((), help="published numbers left out, and why")


def load_registry(path: Optional[Path] = None) -> tuple[Registry, Path]:
    path = path or configs_dir() / REGISTRY
    try:
        return from_dict(Registry, read_yaml(path)), path
    except InputError as e:
        raise e.within(file=str(path)) from None


def row_plan(row: PublishedRow, base: Path) -> Plan:
    """The row's experiment with its published placement."""
    exp = load_experiment(base / row.config)
    places = tuple(RolePlacement(e.role, tuple(range(e.first, e.first + e.count)), e.tp, e.pp)
                   for e in row.layout)
    try:
        return Plan(mode=row.mode, placements=places, experiment=exp)
    except InputError as e:
        raise e.within(prefix=f"rows[{row.id}].layout", file=str(base / "published.yaml")) from None


@dataclass(frozen=True)
class RowResult:
    row: PublishedRow
    plan: Plan
    predicted: Candidate

    @property
    def error(self) -> float:
        """(predicted - published) / published."""
        return (self.predicted.mean - self.row.published_s) / self.row.published_s

    @property
    def generation_s(self) -> float:
        return union_seconds(self.predicted.trace, GENERATION)

    @property
    def training_s(self) -> float:
        return union_seconds(self.predicted.trace, TRAINING)


def predict(registry: Registry, base: Path, seeds: int = SEEDS) -> list[RowResult]:
    out = []
    for row in registry.rows:
        plan = row_plan(row, base)
        cost = AnalyticCostModel.for_experiment(plan.experiment)
        out.append(RowResult(row, plan, score_plan(plan, cost, seeds)))
    return out


# ---- rendering ----------------------------------------------------------------------------

def _pct(x: float) -> str:
    return f"{x * 100:+.0f}%"


def _s(x: Optional[float]) -> str:
    if x is None:
        return "–"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def _layout(plan: Plan) -> str:
    bits = []
    for p in plan.placements:
        par = f"tp{p.tp}" + (f"·pp{p.pp}" if p.pp > 1 else "")
        bits.append(f"{p.role.value} {device_ranges(p.devices)} ({par})")
    return f"{plan.mode.value}: " + "; ".join(bits)


def _median_line(results: list[RowResult], label: str) -> str:
    errs = [r.error for r in results]
    if not errs:
        return f"- {label}: no rows"
    short = sum(1 for e in errs if e < 0)
    return (f"- {label} ({len(errs)} rows): median |error| **{statistics.median(abs(e) for e in errs) * 100:.0f}%**, "
            f"signed median {_pct(statistics.median(errs))}; predicted shorter than published in "
            f"{short} of {len(errs)}")


def _series_rows(results: list[RowResult]) -> list[str]:
    """Step-time ratios between consecutive sizes of a series: less sensitive to the assumed
    lengths and batch than the absolute seconds, since those are the same at every size."""
    lines = []
    names: list[str] = []
    for r in results:
        if r.row.series and r.row.series not in names:
            names.append(r.row.series)
    for name in names:
        rs = sorted((r for r in results if r.row.series == name), key=lambda r: r.plan.cluster.num_gpus)
        for a, b in zip(rs, rs[1:]):
            pub = b.row.published_s / a.row.published_s
            pred = b.predicted.mean / a.predicted.mean
            lines.append(f"| {name} | {a.plan.cluster.num_gpus} → {b.plan.cluster.num_gpus} | "
                         f"{pub:.2f} | {pred:.2f} | {_pct(pred / pub - 1)} |")
    return lines


INTRO = """\
# Predicted against published RL step times

Generated by `python -m yatt.planner.published > docs/published.md` from the rows in
`configs/published/published.yaml` and the experiments next to it;
`tests/planner/test_published.py` fails when this file is stale. Each row is the placement
the authors ran (not the one `yatt plan` would choose), simulated with the analytic cost
model's defaults over {seeds} seeds. Error = (predicted − published) / published.

NVIDIA NeMo-RL's performance-summary page is held out as an independent check: it was not
read, and nothing here is fitted to it.
"""

DEFAULTS = """\
## What this says about the defaults

The analytic defaults (`Efficiency` in `yatt/planner/costmodel.py`, `yatt/catalog/gpus.yaml`)
are unchanged. Most sources state neither the response lengths nor every batch setting, and
yatt's step time is close to proportional to the tokens generated and trained, so a row's
error mixes the cost model's error with the error of its length and batch assumptions; the
registry states those assumptions per row rather than fitting them to the published times.
A single wrong efficiency would push every row the same way; the summary counts how many
rows come out short, and the table shows which phase carries each miss. The series ratios
depend less on those assumptions, since they are the same at every size of a series; where a
ratio misses, the gap points at what yatt does not model, such as a framework's costs that do
not shrink with more GPUs, or a long-tail assumption that does not hold.

Added to the GPU catalog for these rows: H800 (by the H200 ratios, like the other
unmeasured GPUs, with the H800's 400 GB/s NVLink).
"""


def render(results: list[RowResult], registry: Registry, seeds: int = SEEDS) -> str:
    out = [INTRO.format(seeds=seeds)]
    high = [r for r in results if r.row.confidence is Confidence.HIGH]
    mid = [r for r in results if r.row.confidence is not Confidence.LOW]
    out += ["## Summary", "", _median_line(results, "all rows")]
    out.append(_median_line(mid, "rows of confidence H or M"))
    if high:
        out.append(_median_line(high, "rows of confidence H"))
    out += ["", "## Rows", "",
            "| row | system | GPUs | published s | predicted s | error | published gen / train s | "
            "predicted gen / train s | conf. |",
            "|---|---|---|---:|---:|---:|---:|---:|:-:|"]
    for r in results:
        c = r.plan.cluster
        ph = r.row.phases
        pub_ph = ("–" if ph.generation_s is None and ph.training_s is None
                  else f"{_s(ph.generation_s)} / {_s(ph.training_s)}")
        out.append(f"| `{r.row.id}` | {r.row.framework} | {c.num_gpus} × {c.gpu.name} | "
                   f"{_s(r.row.published_s)} | {_s(r.predicted.mean)} ± {r.predicted.spread:.1f} | "
                   f"{_pct(r.error)} | {pub_ph} | {_s(r.generation_s)} / {_s(r.training_s)} | "
                   f"{r.row.confidence.value} |")
    out += ["", "Predicted generation is the time rollout (and reward-model) engines run per step; "
            "predicted training the time the trainer and reference run (old log-probs included).", ""]
    series = _series_rows(results)
    if series:
        out += ["## Scaling within a series", "",
                "Step time at the larger size over the smaller one.", "",
                "| series | GPUs | published | predicted | error |", "|---|---|---:|---:|---:|",
                *series, ""]
    out += [DEFAULTS, "## Rows in detail", ""]
    for r in results:
        out += [f"### `{r.row.id}`", "",
                f"- source: {r.row.source}",
                f"- published: {r.row.measure}; confidence {r.row.confidence.value}",
                f"- experiment: `configs/published/{r.row.config}`; placement {_layout(r.plan)}"]
        out += [f"- given: {g}" for g in r.row.given]
        out += [f"- assumed: {a}" for a in r.row.assumptions]
        out.append("")
    out += ["## Left out, and why", ""]
    out += [f"- `{x.id}` ({x.source}): {x.why}." for x in registry.excluded]
    return "\n".join(out).rstrip("\n") + "\n"


def document(seeds: int = SEEDS) -> str:
    """docs/published.md's text."""
    registry, path = load_registry()
    return render(predict(registry, path.parent, seeds), registry, seeds)


if __name__ == "__main__":
    sys.stdout.write(document())
