"""Measured trace, metrics and run-directory outputs, plus the per-step progress bar.

Why: the executor must emit the same Trace schema as the simulator (source MEASURED), so
replay, calibration and the sim-vs-real fidelity number work on real runs. The recorder
turns wall-clock times into seconds since run start, and writes the run directory:
`trace.jsonl`, `timeline.json` (Perfetto), `metrics.csv`, `plan.yaml`, `learning.png`.
"""
from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any, Optional

from yatt.core.plan import Plan
from yatt.core.roles import Phase, Role, TraceSource
from yatt.core.safeio import atomic_write
from yatt.core.trace import SampleRecord, SpanRecord, Trace, TraceMeta
from yatt.core.version import yatt_version

METRIC_COLUMNS = ("step", "step_s", "reward_mean", "reward_std", "accuracy", "kl", "entropy",
                  "loss", "grad_norm", "genrm_parse_fail", "response_tokens", "samples",
                  "dropped", "rounds", "lr", "clip_frac", "accept_frac", "skipped",
                  "nonfinite_steps", "rollbacks", "restarts", "snapshot_s", "ckpt_stall_s",
                  "overhead_s", "overhead_frac", "train_prep_s", "train_rank_s", "reward_errors", "eval_reward", "eval_accuracy",
                  "eval_samples", "is_weight", "policy_version")
PHASE_COLUMNS = tuple(f"{p.value}_s" for p in Phase)


class Recorder:
    def __init__(self, plan: Plan, seed: int, t0: Optional[float] = None):
        self.plan, self.seed = plan, seed
        self.t0 = time.time() if t0 is None else t0
        self.spans: list[SpanRecord] = []
        self.samples: list[SampleRecord] = []
        self.metrics: list[dict[str, Any]] = []
        self.extra: dict[str, Any] = {}

    def rel(self, wall: float) -> float:
        return max(0.0, wall - self.t0)

    def span(self, step: int, role: Role, phase: Phase, devices: tuple[int, ...],
             start: float, end: float, tokens: int = 0, name: str = "") -> SpanRecord:
        """Record a span from wall-clock (time.time()) start/end."""
        s, e = self.rel(start), self.rel(end)
        rec = SpanRecord(step=step, role=role, phase=phase, devices=tuple(devices), start_s=s,
                         end_s=max(s, e), tokens=int(tokens), name=name)
        self.spans.append(rec)
        return rec

    def add_samples(self, recs: list[SampleRecord]) -> None:
        self.samples.extend(recs)

    def drop_step(self, step: int) -> None:
        """Forget a step's spans, samples and metrics (it failed and will be redone)."""
        self.spans = [s for s in self.spans if s.step != step]
        self.samples = [s for s in self.samples if s.step != step]
        self.metrics = [m for m in self.metrics if m["step"] != step]

    def restore(self, trace: Trace, metrics: list[dict[str, Any]], extra: dict[str, Any],
                end_s: float) -> None:
        """Continue a resumed run: its records so far, and a clock that resumes at `end_s`
        (the outage between crash and resume is left out of the timeline)."""
        self.spans, self.samples = list(trace.spans), list(trace.samples)
        self.metrics = [dict(m) for m in metrics]
        self.extra.update(extra)
        self.t0 = time.time() - end_s

    def busy_s(self, step: int, lo: float, hi: float) -> float:
        """Seconds of [lo, hi] (run-relative) during which at least one of the step's traced
        phases ran: the union of its spans, clipped to the window."""
        busy, cur = 0.0, None
        for a, b in sorted((max(lo, s.start_s), min(hi, s.end_s)) for s in self.spans
                           if s.step == step):
            if b <= a:
                continue
            if cur is None or a > cur[1]:
                busy += cur[1] - cur[0] if cur else 0.0
                cur = [a, b]
            else:
                cur[1] = max(cur[1], b)
        return busy + (cur[1] - cur[0] if cur else 0.0)

    def step_metrics(self, step: int, values: dict[str, Any],
                     start: Optional[float] = None) -> dict[str, Any]:
        """The step's metrics row: `values`, seconds per phase and, given the step's
        wall-clock `start` and `values["step_s"]`, `overhead_s` (step time in which no traced
        phase ran: orchestration between phases) and `overhead_frac` (of step_s)."""
        per_phase: dict[Phase, list[float]] = {}
        for s in self.spans:
            if s.step == step:
                lo, hi = per_phase.get(s.phase, [s.start_s, s.end_s])
                per_phase[s.phase] = [min(lo, s.start_s), max(hi, s.end_s)]
        row = {"step": step, **values}
        if start is not None and "step_s" in values:
            wall = float(values["step_s"])
            lo = self.rel(start)
            idle = min(wall, max(0.0, wall - self.busy_s(step, lo, lo + wall)))
            row["overhead_s"] = round(idle, 4)
            row["overhead_frac"] = round(idle / wall, 4) if wall > 0 else 0.0
        for p in Phase:
            lo_hi = per_phase.get(p)
            row[f"{p.value}_s"] = round(lo_hi[1] - lo_hi[0], 6) if lo_hi else 0.0
        self.metrics.append(row)
        return row

    def trace(self, steps: int) -> Trace:
        import platform

        meta = TraceMeta(source=TraceSource.MEASURED, plan=self.plan, seed=self.seed,
                         yatt_version=yatt_version(), hardware=_hardware(platform.machine()),
                         steps=steps, extra=dict(self.extra))
        samples = tuple(sorted(self.samples, key=lambda r: (r.step, r.sample_id)))
        spans = tuple(sorted(self.spans, key=lambda r: (r.start_s, r.end_s)))
        return Trace(meta, samples, spans)

    def write(self, out_dir: Path, steps: int) -> Trace:
        from yatt.core.config import dump_yaml
        from yatt.core.timeline import write_chrome_trace

        out_dir.mkdir(parents=True, exist_ok=True)
        tr = self.trace(steps)
        tr.write_jsonl(out_dir / "trace.jsonl")
        write_chrome_trace(tr, out_dir / "timeline.json")
        dump_yaml(self.plan, out_dir / "plan.yaml")
        named = sorted({k for row in self.metrics for k in row if k.startswith("reward/")})
        cols = list(METRIC_COLUMNS) + [c for c in PHASE_COLUMNS] + named
        with atomic_write(out_dir / "metrics.csv", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            for row in self.metrics:
                w.writerow({c: row.get(c, "") for c in cols})
        write_learning_png(self.metrics, out_dir / "learning.png")
        return tr


def write_learning_png(rows: list[dict[str, Any]], path: Path) -> bool:
    """learning.png: exact-checker accuracy and mean reward against step (matplotlib is
    imported lazily; without it nothing is written and False is returned)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    steps = [r["step"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, [r.get("accuracy", 0.0) for r in rows], "o-", label="accuracy (exact checker)")
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy")
    ax2 = ax.twinx()
    ax2.plot(steps, [r.get("reward_mean", 0.0) for r in rows], "s--", color="tab:orange",
             label="reward mean")
    ax2.set_ylabel("reward")
    lines = ax.get_lines() + ax2.get_lines()
    ax.legend(lines, [ln.get_label() for ln in lines], loc="lower right", fontsize=8)
    ax.set_title("learning curve")
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
    plt.close(fig)
    return True


def _hardware(machine: str) -> str:
    try:
        import torch
        if torch.cuda.is_available():
            return f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return f"cpu ({machine}, fake Ray GPUs, 1 thread each)"


class Progress:
    """A rich progress bar over steps showing reward and step time (no-op if disabled)."""

    def __init__(self, steps: int, label: str, enabled: bool = True):
        self.bar = None
        if enabled:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RP,
                                       TextColumn, TimeElapsedColumn)
            self.bar = RP(TextColumn("[bold]{task.description}"), BarColumn(),
                          MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                          TimeElapsedColumn())
            self.bar.start()
            self.task = self.bar.add_task(label, total=steps, info="starting engines")

    def note(self, info: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, info=info)

    def step(self, row: dict[str, Any]) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1,
                            info=f"reward {row.get('reward_mean', 0):.3f}  "
                                 f"acc {row.get('accuracy', 0):.2f}  "
                                 f"loss {row.get('loss', 0):.4f}  step {row.get('step_s', 0):.1f}s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
