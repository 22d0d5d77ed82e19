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
from typing import Any, Iterator

from .safeio import atomic_write
from .trace import Trace


def _events(trace: Trace) -> Iterator[dict[str, Any]]:
    ndev = trace.meta.plan.cluster.num_gpus
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


def _other(trace: Trace) -> dict[str, Any]:
    return {"source": trace.meta.source.value, "plan": trace.meta.plan.describe()}


def chrome_trace(trace: Trace) -> dict[str, Any]:
    """The trace as a Chrome trace-event JSON object."""
    return {"traceEvents": list(_events(trace)), "displayTimeUnit": "ms", "otherData": _other(trace)}


def write_chrome_trace(trace: Trace, path: str | Path) -> Path:
    """`chrome_trace` written event by event (a 100k-GPU timeline never sits in memory
    whole), atomically and never through a link (`safeio`)."""
    with atomic_write(path) as f:
        f.write('{"traceEvents":[')
        for i, ev in enumerate(_events(trace)):
            f.write(("," if i else "") + json.dumps(ev, separators=(",", ":")))
        f.write('],"displayTimeUnit":"ms","otherData":'
                + json.dumps(_other(trace), separators=(",", ":")) + "}")
    return Path(path)
