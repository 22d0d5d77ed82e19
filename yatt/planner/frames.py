"""Traces as pandas DataFrames (one per record kind), and optional Parquet export.

Why: a trace is the raw material of capacity planning, and people analyse it in pandas.
`yatt.core` may not import pandas, so the DataFrame view lives here. The JSONL file itself
is also directly loadable: `pd.read_json(path, lines=True)` gives one frame with a `kind`
column (the meta row holds nested plan data); `trace_frames` splits it cleanly.

Parquet needs pyarrow, which yatt does not depend on: `write_parquet` returns None when
it is not importable, so callers can skip the export and say so.
"""
from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Optional

import pandas as pd

from yatt.core.safeio import atomic_write
from yatt.core.schema import to_dict
from yatt.core.trace import SampleRecord, SpanRecord, Trace

KINDS = ("meta", "sample", "span")


def trace_frames(trace: Trace) -> dict[str, pd.DataFrame]:
    """{"meta": 1 row, "sample": one row per sample, "span": one row per span}.

    Enum columns hold their string values; span `devices` is a list per row, and
    `duration_s` is added for convenience."""
    meta = to_dict(trace.meta)
    meta_row = {"source": meta["source"], "seed": meta["seed"], "schema": meta["schema"],
                "yatt_version": meta["yatt_version"], "hardware": meta["hardware"],
                "steps": meta["steps"], "mode": meta["plan"]["mode"],
                "plan": trace.meta.plan.describe()}
    samples = pd.DataFrame([to_dict(s) for s in trace.samples], columns=_columns(SampleRecord))
    spans = pd.DataFrame([to_dict(s) for s in trace.spans], columns=_columns(SpanRecord))
    spans["duration_s"] = spans["end_s"] - spans["start_s"]
    return {"meta": pd.DataFrame([meta_row]), "sample": samples, "span": spans}


def _columns(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def read_frames(path: str | Path) -> dict[str, pd.DataFrame]:
    """Validate a JSONL trace (InputError naming the line on bad input), then frame it."""
    return trace_frames(Trace.read_jsonl(path))


def parquet_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def write_parquet(trace: Trace, out_dir: str | Path) -> Optional[list[Path]]:
    """samples.parquet and spans.parquet under out_dir; None when pyarrow is missing."""
    if not parquet_available():
        return None
    frames = trace_frames(trace)
    out = Path(out_dir)
    paths = []
    for kind in ("sample", "span"):
        p = out / f"{kind}s.parquet"
        with atomic_write(p, "wb") as f:   # never through a link, never half a file
            frames[kind].to_parquet(f, index=False)
        paths.append(p)
    return paths
