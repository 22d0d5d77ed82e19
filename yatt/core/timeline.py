"""Chrome/Perfetto trace JSON from a Trace: one track per device, spans named by phase.

Why: a timeline is the fastest way to see bubbles and overlaps, and both the simulator and
the executor produce Traces, so the export lives in core (pure Python, no dependencies).
Open the file at https://ui.perfetto.dev or chrome://tracing.

Layout up to `MAX_DEVICE_TRACKS` devices: one process ("yatt") whose threads are the
devices (tid = device id, named "gpu N"); each span becomes one complete event ("ph": "X")
per device it covers, with times in microseconds, the phase as `name` and `cat`,
role/step/tokens in `args`.

Beyond that (thousands of devices, one event per device would be hundreds of thousands),
the file stays bounded by the number of spans: devices are aggregated into at most
`MAX_LANES` lanes of consecutive devices, each a counter track of busy devices per phase
(one "C" event where a count changes), and per-device spans are kept for the first TP
group of each role only. `otherData.layout` says so in the file.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Iterator

from .safeio import atomic_write
from .trace import Trace

MAX_DEVICE_TRACKS = 512
MAX_LANES = 256


def _device_events(trace: Trace, ndev: int) -> Iterator[dict[str, Any]]:
    yield {"ph": "M", "pid": 0, "tid": 0, "name": "process_name", "args": {"name": "yatt"}}
    for d in range(ndev):
        yield {"ph": "M", "pid": 0, "tid": d, "name": "thread_name", "args": {"name": f"gpu {d}"}}
        yield {"ph": "M", "pid": 0, "tid": d, "name": "thread_sort_index", "args": {"sort_index": d}}
    for s in trace.spans:
        ts, dur = s.start_s * 1e6, max(0.0, s.duration) * 1e6
        args = {"role": s.role.value, "step": s.step, "tokens": s.tokens, "label": s.name}
        for d in s.devices:
            yield {"ph": "X", "pid": 0, "tid": d, "name": s.phase.value, "cat": s.role.value,
                   "ts": ts, "dur": dur, "args": args}


def _parts(trace: Trace) -> tuple[Iterable[dict[str, Any]], dict[str, Any]]:
    """(events, otherData): per-device events generated lazily, or the bounded lane layout."""
    ndev = trace.meta.plan.cluster.num_gpus
    if ndev > MAX_DEVICE_TRACKS:
        doc = _lane_trace(trace, ndev)
        return doc["traceEvents"], doc["otherData"]
    return (_device_events(trace, ndev),
            {"source": trace.meta.source.value, "plan": trace.meta.plan.describe()})


def chrome_trace(trace: Trace) -> dict[str, Any]:
    """The trace as a Chrome trace-event JSON object."""
    events, other = _parts(trace)
    return {"traceEvents": list(events), "displayTimeUnit": "ms", "otherData": other}


def _lane_trace(trace: Trace, ndev: int) -> dict[str, Any]:
    """Counter lanes of busy devices per phase, plus per-device spans of a few devices."""
    k = 1
    while -(-ndev // k) > MAX_LANES:
        k *= 2
    # per lane: time -> phase -> change in busy devices
    change: dict[int, dict[float, dict[str, int]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(int)))
    for s in trace.spans:
        per: dict[int, int] = defaultdict(int)
        for d in s.devices:
            per[d // k] += 1
        ph = s.phase.value
        for lane, n in per.items():
            change[lane][s.start_s][ph] += n
            change[lane][s.end_s][ph] -= n
    phases = sorted({s.phase.value for s in trace.spans})
    shown = sorted({p.groups()[0][0] for p in trace.meta.plan.placements if p.groups()})
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 0, "tid": 0, "name": "process_name", "args": {"name": f"lanes of {k} GPUs"}},
        {"ph": "M", "pid": 1, "tid": 0, "name": "process_name", "args": {"name": "sampled GPUs"}}]
    for lane in sorted(change):
        lo, hi = lane * k, min(ndev, (lane + 1) * k) - 1
        name = f"gpus {lo}..{hi} busy"
        busy = dict.fromkeys(phases, 0)
        for t in sorted(change[lane]):
            for ph, dn in change[lane][t].items():
                busy[ph] += dn
            events.append({"ph": "C", "pid": 0, "name": name, "ts": t * 1e6, "args": dict(busy)})
    for d in shown:
        events.append({"ph": "M", "pid": 1, "tid": d, "name": "thread_name",
                       "args": {"name": f"gpu {d}"}})
    keep = set(shown)
    for s in trace.spans:
        on = keep.intersection(s.devices)
        if not on:
            continue
        ts, dur = s.start_s * 1e6, max(0.0, s.duration) * 1e6
        args = {"role": s.role.value, "step": s.step, "tokens": s.tokens, "label": s.name,
                "devices": len(s.devices)}
        for d in sorted(on):
            events.append({"ph": "X", "pid": 1, "tid": d, "name": s.phase.value,
                           "cat": s.role.value, "ts": ts, "dur": dur, "args": args})
    layout = (f"{ndev} devices: aggregated into lanes of {k} consecutive GPUs, each a counter "
              "of busy devices per phase; per-device spans only for the first device of each "
              f"role ({', '.join(f'gpu {d}' for d in shown)})")
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": trace.meta.source.value, "plan": trace.meta.plan.describe(),
                          "layout": layout}}


def write_chrome_trace(trace: Trace, path: str | Path) -> Path:
    """`chrome_trace` written event by event, atomically and never through a link
    (`safeio`)."""
    events, other = _parts(trace)
    with atomic_write(path) as f:
        f.write('{"traceEvents":[')
        for i, ev in enumerate(events):
            f.write(("," if i else "") + json.dumps(ev, separators=(",", ":")))
        f.write('],"displayTimeUnit":"ms","otherData":'
                + json.dumps(other, separators=(",", ":")) + "}")
    return Path(path)
