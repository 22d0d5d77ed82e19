"""Chrome/Perfetto trace JSON from a Trace: one track per device, spans named by phase.

Why: a timeline is the fastest way to see bubbles and overlaps, and both the simulator and
the executor produce Traces, so the export lives in core (pure Python, no dependencies).
Open the file at https://ui.perfetto.dev or chrome://tracing.

Layout: one process ("yatt") whose threads are the devices (tid = device id, named
"gpu N"); each span becomes one complete event ("ph": "X") per device it covers, with
times in microseconds, the phase as `name` and `cat`, role/step/tokens in `args`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .safeio import write_text
from .trace import Trace


def chrome_trace(trace: Trace) -> dict[str, Any]:
    """The trace as a Chrome trace-event JSON object."""
    ndev = trace.meta.plan.cluster.num_gpus
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 0, "tid": 0, "name": "process_name", "args": {"name": "yatt"}}]
    for d in range(ndev):
        events.append({"ph": "M", "pid": 0, "tid": d, "name": "thread_name",
                       "args": {"name": f"gpu {d}"}})
        events.append({"ph": "M", "pid": 0, "tid": d, "name": "thread_sort_index",
                       "args": {"sort_index": d}})
    for s in trace.spans:
        ts, dur = s.start_s * 1e6, max(0.0, s.duration) * 1e6
        args = {"role": s.role.value, "step": s.step, "tokens": s.tokens, "label": s.name}
        for d in s.devices:
            events.append({"ph": "X", "pid": 0, "tid": d, "name": s.phase.value,
                           "cat": s.role.value, "ts": ts, "dur": dur, "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": trace.meta.source.value, "plan": trace.meta.plan.describe()}}


def write_chrome_trace(trace: Trace, path: str | Path) -> Path:
    return write_text(path, json.dumps(chrome_trace(trace), separators=(",", ":")))
