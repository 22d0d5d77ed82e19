"""`summarize(trace) -> StepStats`: the numbers a planner or a person compares runs by.

Why: works on any Trace (simulated or measured), so the same summary backs plan ranking,
the fidelity report and `yatt replay`.

Definitions (all over the steps in the trace):
  step_time_mean/std  wall time of each step (first span start to last span end). Async
                      traces (steps overlap) use the simulator's per-step times (from one
                      train end to the next) over the steps after warm-up, when there are
                      any; the device, throughput and sample figures below then cover the
                      same steady window (from the warm-up's train end to the last one).
  phase_time          wall extent of each phase, averaged per step (Trace.phase_times).
  phase_device_s      device-seconds spent in each phase, averaged per step.
  device_busy/idle    per device, over the whole run [first start, last end]; busy merges
                      overlapping spans on a device.
  bubble_fraction     idle device-seconds / (devices in the cluster * run time).
  tokens_per_s        trained tokens (prompt + response of kept samples) per second.
  generated_tokens_per_s  response tokens generated (kept or not) per second.
  samples_per_s       kept (trained) samples per second.
  balance_max_over_mean   trainer DP load max/mean averaged over steps (simulated traces;
                      NaN when the trace does not carry it).
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from yatt.core import Phase, Trace


@dataclass(frozen=True)
class StepStats:
    steps: int
    step_time_mean: float
    step_time_std: float
    run_time: float
    phase_time: dict[Phase, float]
    phase_device_s: dict[Phase, float]
    device_busy: dict[int, float]
    device_idle: dict[int, float]
    bubble_fraction: float
    tokens_per_s: float
    generated_tokens_per_s: float
    samples_per_s: float
    samples_kept: int
    samples_dropped: int
    balance_max_over_mean: float


def _async_steps(trace: Trace) -> tuple[list[dict], int]:
    """An async trace's per-step records in step order and how many lead as warm-up (0
    when no step would be left after it); ([], 0) for other traces."""
    extra = trace.meta.extra if isinstance(trace.meta.extra, dict) else {}
    info = extra.get("async")
    per = extra.get("steps")
    if not (isinstance(info, dict) and isinstance(per, list) and per):
        return [], 0
    ordered = sorted((x for x in per if isinstance(x, dict)), key=lambda x: x.get("step", 0))
    warm = int(info.get("warmup_steps", 0))
    return ordered, warm if len(ordered) > warm else 0


def step_times(trace: Trace) -> list[float]:
    """The step times `summarize` averages (see the module docstring)."""
    ordered, warm = _async_steps(trace)
    if ordered:
        return [float(x["step_time_s"]) for x in ordered[warm:]]
    return list(trace.step_times().values())


def steady_window(trace: Trace) -> tuple[float, float, int] | None:
    """(start, end, first step) of an async trace's steady state: from the warm-up's last
    train end to the last train end (None for other traces or without warm-up)."""
    ordered, warm = _async_steps(trace)
    if not ordered or not warm:
        return None
    return (float(ordered[warm - 1]["train_end_s"]), float(ordered[-1]["train_end_s"]),
            int(ordered[warm]["step"]))


def busy_within(trace: Trace, lo: float, hi: float) -> dict[int, float]:
    """Seconds each device spends inside spans within [lo, hi] (overlaps merged)."""
    by_dev: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for s in trace.spans:
        a, b = max(lo, s.start_s), min(hi, s.end_s)
        if b > a:
            for d in s.devices:
                by_dev[d].append((a, b))
    out = {}
    for d, ivs in by_dev.items():
        total, end = 0.0, float("-inf")
        for a, b in sorted(ivs):
            if b > end:
                total += b - max(a, end)
                end = b
        out[d] = total
    return out


def summarize(trace: Trace) -> StepStats:
    times = step_times(trace)
    n = len(times)
    n_all = len(trace.steps()) or n
    mean = sum(times) / n if n else 0.0
    std = math.sqrt(sum((t - mean) ** 2 for t in times) / n) if n else 0.0
    if trace.spans:
        lo = min(s.start_s for s in trace.spans)
        hi = max(s.end_s for s in trace.spans)
    else:
        lo = hi = 0.0
    dev_s: dict[Phase, float] = defaultdict(float)
    for s in trace.spans:
        dev_s[s.phase] += s.duration * len(s.devices)
    window = steady_window(trace)
    if window is None:
        busy = trace.device_busy()
        samples = list(trace.samples)
    else:
        lo, hi, first = window
        busy = busy_within(trace, lo, hi)
        samples = [s for s in trace.samples if s.step >= first]
    run = hi - lo
    devices = range(trace.meta.plan.cluster.num_gpus)
    busy_all = {d: busy.get(d, 0.0) for d in devices}
    idle = {d: max(0.0, run - b) for d, b in busy_all.items()}
    kept = [s for s in samples if s.kept]
    trained_tok = sum(s.prompt_tokens + s.response_tokens for s in kept)
    gen_tok = sum(s.response_tokens for s in samples)
    per_step = trace.meta.extra.get("steps", []) if isinstance(trace.meta.extra, dict) else []
    bal = [x["balance"]["max_over_mean"] for x in per_step
           if isinstance(x, dict) and isinstance(x.get("balance"), dict)]
    div = run if run > 0 else float("nan")
    return StepStats(
        steps=n, step_time_mean=mean, step_time_std=std, run_time=run,
        phase_time=trace.phase_times(), phase_device_s={p: v / max(1, n_all) for p, v in dev_s.items()},
        device_busy=busy_all, device_idle=idle,
        bubble_fraction=(sum(idle.values()) / (len(idle) * run)) if run > 0 and idle else 0.0,
        tokens_per_s=trained_tok / div, generated_tokens_per_s=gen_tok / div,
        samples_per_s=len(kept) / div, samples_kept=len(kept),
        samples_dropped=len(samples) - len(kept),
        balance_max_over_mean=sum(bal) / len(bal) if bal else float("nan"))
