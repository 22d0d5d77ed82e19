"""The Trace: one schema for simulated and measured runs.

Why: the simulator and the executor write the same records, which is what makes replay,
calibration and the sim-vs-real fidelity number possible. A trace is a JSONL file whose
first line is the `meta` record; every other line is a `sample` or a `span`. A path
ending in `.gz` is read and written gzip-compressed (pandas reads both forms).
"""
from __future__ import annotations

import gzip
import json
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from .errors import InputError
from .limits import MAX_GPUS, MAX_RESAMPLE_ROUNDS, MAX_SECONDS, MAX_STEPS, MAX_TOKENS
from .plan import Plan
from .roles import Phase, Role, TraceSource
from .schema import from_dict, spec_field, to_dict

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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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
        """Write atomically (temp file + rename) so a crash never leaves half a trace."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with _open(path, "w", tmp) as f:
            for rec in self.records():
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        tmp.replace(path)

    @staticmethod
    def from_records(records: Iterable[tuple[int, dict[str, Any]]], file: str = "") -> "Trace":
        meta = None
        samples: list[SampleRecord] = []
        spans: list[SpanRecord] = []
        for lineno, rec in records:
            where = f"line {lineno}"
            if not isinstance(rec, dict):
                raise InputError("a record must be a JSON object", field=where, file=file)
            kind = rec.get("kind")
            body = {k: v for k, v in rec.items() if k != "kind"}
            try:
                if kind == "meta":
                    if meta is not None:
                        raise InputError("a second meta record", field="kind")
                    meta = from_dict(TraceMeta, body)
                elif kind == "sample":
                    samples.append(from_dict(SampleRecord, body))
                elif kind == "span":
                    spans.append(from_dict(SpanRecord, body))
                else:
                    raise InputError(f"got {kind!r}; allowed: meta|sample|span", field="kind")
            except InputError as e:
                raise InputError(e.message, field=f"{where}: {e.field}" if e.field else where,
                                 file=file) from None
            if meta is None:
                raise InputError("the first record must be the meta record", field=where, file=file)
        if meta is None:
            raise InputError("empty trace: no meta record", file=file)
        return Trace(meta, tuple(samples), tuple(spans))

    @staticmethod
    def read_jsonl(path: str | Path) -> "Trace":
        path = Path(path)
        try:
            ok = path.is_file()
        except (OSError, ValueError):  # a name too long, an embedded NUL, ...
            ok = False
        if not ok:
            raise InputError("no such file", file=str(path))

        def lines() -> Iterator[tuple[int, str]]:
            # Bytes in, decoded line by line: a bad byte is reported on its own line (a text
            # handle decodes whole buffers ahead and would blame an earlier line).
            i = 0
            try:
                with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
                    for i, raw in enumerate(f, 1):
                        try:
                            line = raw.decode("utf-8")
                        except UnicodeDecodeError as e:
                            raise InputError(f"not UTF-8 text (byte {e.start})", field=f"line {i}",
                                             file=str(path)) from None
                        yield i, line
            except (OSError, EOFError, zlib.error) as e:  # unreadable, or a corrupt/truncated .gz
                raise InputError(f"cannot read: {e}", field=f"line {i + 1}", file=str(path)) from None

        def gen() -> Iterator[tuple[int, dict[str, Any]]]:
            for i, line in lines():
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise InputError(f"not valid JSON ({e.msg} at column {e.colno})",
                                     field=f"line {i}", file=str(path)) from None
                except RecursionError:
                    raise InputError("not valid JSON (nested too deeply)", field=f"line {i}",
                                     file=str(path)) from None
                except ValueError as e:  # e.g. an integer past Python's digit limit
                    why = str(e).splitlines()[0][:100] if str(e) else type(e).__name__
                    if "integer string conversion" in why:
                        why = "an integer with more than 4300 digits"
                    raise InputError(f"not valid JSON ({why})",
                                     field=f"line {i}", file=str(path)) from None
                yield i, rec

        return Trace.from_records(gen(), file=str(path))


def _open(path: Path, mode: str, real: Optional[Path] = None):
    """Text file handle; gzip when `path` ends in .gz (`real` is the file actually opened)."""
    target = real or path
    if path.suffix == ".gz":
        return gzip.open(target, mode + "t", compresslevel=6) if mode == "w" else gzip.open(target, "rt")
    return open(target, mode)


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
