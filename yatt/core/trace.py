"""The Trace: one schema for simulated and measured runs.

Why: the simulator and the executor write the same records, which is what makes replay,
calibration and the sim-vs-real fidelity number possible. A trace is a JSONL file whose
first line is the `meta` record; every other line is a `sample` or a `span`. A path
ending in `.gz` is read and written gzip-compressed (pandas reads both forms).
"""
from __future__ import annotations

import gzip
import json
from array import array
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

import numpy as np

from .errors import InputError
from .jsonl import line_batches, parse_line
from .limits import MAX_GPUS, MAX_RESAMPLE_ROUNDS, MAX_SECONDS, MAX_STEPS, MAX_TOKENS
from .plan import Plan
from .roles import Phase, Role, TraceSource
from .safeio import atomic_write
from .schema import from_dict, from_dicts, show, spec_field, to_dict

SCHEMA_VERSION = "yatt.trace/1"


@dataclass(frozen=True)
class TraceMeta:
    source: TraceSource
    plan: Plan
    seed: int = 0
    yatt_version: str = ""
    schema: str = SCHEMA_VERSION
    hardware: str = ""
    steps: int = spec_field(1, ge=0, le=MAX_STEPS)
    extra: dict[str, Any] = spec_field(default_factory=dict, help="free-form run facts")

    def __post_init__(self) -> None:
        if self.schema != SCHEMA_VERSION:
            raise InputError(f"got {self.schema!r}; allowed: {SCHEMA_VERSION}", field="schema")


@dataclass(frozen=True, slots=True)   # slots: a trace holds millions of records
class SampleRecord:
    """One generated response and what happened to it."""

    step: int = spec_field(ge=0, le=MAX_STEPS)
    sample_id: int = spec_field(ge=0)
    prompt_id: int = spec_field(ge=0)
    prompt_tokens: int = spec_field(ge=0, le=MAX_TOKENS)
    response_tokens: int = spec_field(ge=0, le=MAX_TOKENS)
    genrm_input_tokens: int = spec_field(0, ge=0, le=3 * MAX_TOKENS)  # prompt + response + template
    genrm_output_tokens: int = spec_field(0, ge=0, le=MAX_TOKENS)
    reward: Optional[float] = None
    kept: bool = True
    dp_rank: int = spec_field(-1, ge=-1, le=MAX_GPUS, help="-1 when not trained (dropped)")
    round: int = spec_field(0, ge=0, le=MAX_RESAMPLE_ROUNDS, help="dynamic-sampling round that produced it")
    rollout_end_s: Optional[float] = spec_field(None, ge=0, le=MAX_SECONDS)
    genrm_end_s: Optional[float] = spec_field(None, ge=0, le=MAX_SECONDS)
    policy_version: int = spec_field(-1, ge=-1, le=MAX_STEPS,
                                     help="weight version (train steps applied) that generated "
                                          "it; -1 when not recorded")


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One phase of work on a set of devices, in seconds since the run started."""

    step: int = spec_field(ge=0, le=MAX_STEPS)
    role: Role = Role.TRAINER
    phase: Phase = Phase.TRAIN
    devices: tuple[int, ...] = ()
    start_s: float = spec_field(0.0, ge=0, le=MAX_SECONDS)
    end_s: float = spec_field(0.0, ge=0, le=MAX_SECONDS)
    tokens: int = spec_field(0, ge=0)
    name: str = ""

    def __post_init__(self) -> None:
        for i, d in enumerate(self.devices):
            if not 0 <= d < MAX_GPUS:
                raise InputError(f"got {d}; allowed: a device id >= 0 and < {MAX_GPUS}",
                                 field=f"devices[{i}]")
        if self.end_s < self.start_s:
            raise InputError(f"end_s ({self.end_s}) is before start_s ({self.start_s})",
                             field="end_s")

    @property
    def duration(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Trace:
    meta: TraceMeta
    samples: tuple[SampleRecord, ...]
    spans: tuple[SpanRecord, ...]

    # ---- summaries -------------------------------------------------------------------
    def steps(self) -> list[int]:
        return sorted({s.step for s in self.spans} | {s.step for s in self.samples})

    def step_bounds(self) -> dict[int, tuple[float, float]]:
        out: dict[int, tuple[float, float]] = {}
        for s in self.spans:
            lo, hi = out.get(s.step, (s.start_s, s.end_s))
            out[s.step] = (min(lo, s.start_s), max(hi, s.end_s))
        return out

    def step_times(self) -> dict[int, float]:
        return {k: hi - lo for k, (lo, hi) in self.step_bounds().items()}

    def phase_times(self, step: Optional[int] = None) -> dict[Phase, float]:
        """Wall-clock extent of each phase (first start to last end) within a step,
        averaged over steps when `step` is None."""
        per: dict[int, dict[Phase, list[float]]] = defaultdict(dict)
        for s in self.spans:
            if step is not None and s.step != step:
                continue
            lo, hi = per[s.step].get(s.phase, [s.start_s, s.end_s])
            per[s.step][s.phase] = [min(lo, s.start_s), max(hi, s.end_s)]
        totals: dict[Phase, float] = defaultdict(float)
        for phases in per.values():
            for ph, (lo, hi) in phases.items():
                totals[ph] += hi - lo
        n = max(1, len(per))
        return {ph: v / n for ph, v in totals.items()}

    def phase_role_busy(self) -> dict[tuple[int, Phase, Role], float]:
        """Seconds each (step, phase, role) is busy: the length of the union of its spans.

        The unit `yatt calibrate` fits to and `yatt replay` compares: unlike a phase's
        extent, it does not stretch across a step when a phase recurs (several offloads)."""
        ivs: dict[tuple[int, Phase, Role], list[tuple[float, float]]] = defaultdict(list)
        for s in self.spans:
            ivs[(s.step, s.phase, s.role)].append((s.start_s, s.end_s))
        return {k: _union_length(v) for k, v in ivs.items()}

    def device_busy(self) -> dict[int, float]:
        """Seconds each device spends inside spans (overlaps on a device merged)."""
        by_dev: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for s in self.spans:
            for d in s.devices:
                by_dev[d].append((s.start_s, s.end_s))
        out = {}
        for d, ivs in by_dev.items():
            ivs.sort()
            busy, cur_lo, cur_hi = 0.0, None, None
            for lo, hi in ivs:
                if cur_hi is None or lo > cur_hi:
                    if cur_hi is not None:
                        busy += cur_hi - cur_lo
                    cur_lo, cur_hi = lo, hi
                else:
                    cur_hi = max(cur_hi, hi)
            if cur_hi is not None:
                busy += cur_hi - cur_lo
            out[d] = busy
        return out

    # ---- I/O -------------------------------------------------------------------------
    def records(self) -> Iterator[dict[str, Any]]:
        yield {"kind": "meta", **to_dict(self.meta)}
        for s in self.samples:
            yield {"kind": "sample", **to_dict(s)}
        for sp in self.spans:
            yield {"kind": "span", **to_dict(sp)}

    def write_jsonl(self, path: str | Path) -> None:
        """Write atomically and never through a link (`safeio`): a crash never leaves half
        a trace. gzip-compressed when the name ends in .gz."""
        path = Path(path)
        with atomic_write(path, "wb") as raw:
            out = (gzip.GzipFile(filename=path.name, mode="wb", fileobj=raw, compresslevel=6)
                   if path.suffix == ".gz" else raw)
            try:
                lines: list[str] = []
                for rec in self.records():
                    lines.append(json.dumps(rec, separators=(",", ":")))
                    if len(lines) >= 4096:
                        out.write(("\n".join(lines) + "\n").encode())
                        lines.clear()
                if lines:
                    out.write(("\n".join(lines) + "\n").encode())
            finally:
                if out is not raw:
                    out.close()

    @staticmethod
    def from_records(records: Iterable[tuple[int, dict[str, Any]]], file: str = "") -> "Trace":
        """A Trace from (line number, record) pairs, validated one record at a time."""
        b = _Builder(file)
        for lineno, rec in records:
            b.exact(lineno, rec)
        return b.finish()

    @staticmethod
    def read_jsonl(path: str | Path) -> "Trace":
        """Read and validate a JSONL trace (.gz: gzip) within the size caps of
        `yatt.core.limits` (`jsonl.line_batches`). Records are checked a batch at a time
        (`schema.from_dicts`); a batch with any doubt is re-read record by record, which
        names the first bad line."""
        path = Path(path)
        try:
            ok = path.is_file()
        except (OSError, ValueError):  # a name too long, an embedded NUL, ...
            ok = False
        if not ok:
            raise InputError("no such file", file=str(path))
        b = _Builder(str(path))
        for batch in line_batches(path):
            b.batch([(i, parse_line(raw, i, b.file)) for i, raw in batch])
        return b.finish()


_KIND = frozenset({"kind"})


class _Builder:
    """Collects a trace's records in order; `finish` checks what spans records."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.meta: Optional[TraceMeta] = None
        self.samples: list[SampleRecord] = []
        self.spans: list[SpanRecord] = []
        self.sample_lines = array("q")
        self.span_lines = array("q")

    def exact(self, lineno: int, rec: Any) -> None:
        """One record, converted field by field (the precise error on bad input)."""
        where = f"line {lineno}"
        if not isinstance(rec, dict):
            raise InputError("a record must be a JSON object", field=where, file=self.file)
        kind = rec.get("kind")
        body = {k: v for k, v in rec.items() if k != "kind"}
        try:
            if kind == "meta":
                if self.meta is not None:
                    raise InputError("a second meta record", field="kind")
                self.meta = from_dict(TraceMeta, body)
            elif kind == "sample":
                self.samples.append(from_dict(SampleRecord, body))
                self.sample_lines.append(lineno)
            elif kind == "span":
                self.spans.append(from_dict(SpanRecord, body))
                self.span_lines.append(lineno)
            else:
                raise InputError(f"got {show(kind)}; allowed: meta|sample|span", field="kind")
        except InputError as e:
            raise InputError(e.message, field=f"{where}: {e.field}" if e.field else where,
                             file=self.file) from None
        if self.meta is None:
            raise InputError("the first record must be the meta record", field=where, file=self.file)

    def batch(self, pairs: list[tuple[int, Any]]) -> None:
        """Records of consecutive lines: samples and spans a column at a time when they
        all pass, else one by one."""
        if self.meta is None and pairs:
            self.exact(*pairs[0])
            pairs = pairs[1:]
        groups: dict[str, tuple[list[Any], list[int]]] = {"sample": ([], []), "span": ([], [])}
        for lineno, rec in pairs:
            kind = rec.get("kind") if type(rec) is dict else None
            g = groups.get(kind) if type(kind) is str else None
            if g is None:   # not a sample or a span: the exact path says what it is
                return self._exact_all(pairs)
            g[0].append(rec)
            g[1].append(lineno)
        built = {}
        for kind, cls in (("sample", SampleRecord), ("span", SpanRecord)):
            rows = groups[kind][0]
            built[kind] = from_dicts(cls, rows, _KIND) if rows else []
            if built[kind] is None:
                return self._exact_all(pairs)
        self.samples += built["sample"]
        self.sample_lines.extend(groups["sample"][1])
        self.spans += built["span"]
        self.span_lines.extend(groups["span"][1])

    def _exact_all(self, pairs: list[tuple[int, Any]]) -> None:
        for lineno, rec in pairs:
            self.exact(lineno, rec)

    def finish(self) -> Trace:
        if self.meta is None:
            raise InputError("empty trace: no meta record", file=self.file)
        self._unique_samples()
        self._devices_in_cluster()
        return Trace(self.meta, tuple(self.samples), tuple(self.spans))

    def _unique_samples(self) -> None:
        """A (step, sample_id) recorded twice would count its sample twice in throughput."""
        n = len(self.samples)
        if n < 2:
            return
        step = np.fromiter((s.step for s in self.samples), np.int64, n)
        sid = np.fromiter((s.sample_id for s in self.samples), np.int64, n)
        order = np.lexsort((sid, step))
        dup = np.flatnonzero((step[order][1:] == step[order][:-1]) & (sid[order][1:] == sid[order][:-1]))
        if dup.size:
            later = max(order[dup[0]], order[dup[0] + 1])
            first = min(order[dup[0]], order[dup[0] + 1])
            raise InputError(f"sample {sid[later]} of step {step[later]} is recorded twice (first "
                             f"at line {self.sample_lines[first]}); allowed: one record per "
                             "(step, sample_id)", field=f"line {self.sample_lines[later]}: sample_id",
                             file=self.file)

    def _devices_in_cluster(self) -> None:
        assert self.meta is not None
        n = self.meta.plan.cluster.num_gpus
        for i, s in enumerate(self.spans):
            if s.devices and max(s.devices) >= n:
                j = next(k for k, d in enumerate(s.devices) if d >= n)
                raise InputError(f"device {s.devices[j]} is outside the recorded plan's cluster "
                                 f"(devices 0..{n - 1})", field=f"line {self.span_lines[i]}: "
                                 f"devices[{j}]", file=self.file)


def _union_length(ivs: list[tuple[float, float]]) -> float:
    ivs = sorted(ivs)
    total, lo, hi = 0.0, ivs[0][0], ivs[0][1]
    for a, b in ivs[1:]:
        if a > hi:
            total += hi - lo
            lo, hi = a, b
        else:
            hi = max(hi, b)
    return total + hi - lo
