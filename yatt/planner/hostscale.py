"""Host rescale: a profile's measured seconds carried over to the host that plans with it.

Why: a profile's tables are seconds on the host, and in the hour, it was measured on. Another
machine of the same kind, or the same VM in a faster or slower state, runs every term
faster or slower: the profiling host itself ran the profile's host probe at 0.91-1.07x its
profile-time speed over one fidelity bench (bench/results/fidelity.json, `host_ratios`),
and another machine of the same kind ran it 11-15% faster, with every case over-predicted.
`yatt profile` records a fixed probe (`yatt.profiling.microbench.host_probe_parts_once`);
timing the same probe before a prediction gives now / then, and `rescale_profile` applies
it to the profile's times, so the prediction is made for this host, a priori.

The probe has two parts, a pure-Python loop and 256x256 fp32 matmuls. The measured terms
fall in three kinds, and the first two follow the Python part:
  interpreter-bound  engine create, Ray round trips, engine calls, stream
                     hand-offs, weight sync and object-store transfers (Python and process
                     work around small tensors), and the analytic fallback's overheads the
                     profile copied from them
  model tables       the train, log-prob, decode, prefill and join tables and the TP / DP
                     group steps: the models a CPU profile measures run kernels of a few
                     hundred thousand to a few million parameters at batches up to 64, whose
                     time is the framework's per-op work (Python, dispatch, small GEMMs far
                     from the large-matmul rate), so they move with the interpreter, not
                     with what vector units do for large matmuls
  host-bound         an engine's teardown (the offload phase): ending its processes and
                     handing their memory back is kernel work, and the measured offload held
                     at 0.16-0.23 s per step over four fidelity runs on one EPYC VM whose probe
                     read 0.99-1.84x (interpreter part), while the same runs on a Xeon read
                     ~0.95 s at 1.0x; it stays as measured
Measured across two CPU kinds (`bench/fidelity.py`, docs/fidelity.md): a profile made on an
AMD EPYC, run on an Intel Xeon, found the Xeon's matmul part 0.63x and Python part 1.03x
while its tables ran 0.99-1.2x, so the tables follow the Python part there; the reverse pair
(a Xeon profile on an EPYC) ran the tables ~1.3x at a Python part of 1.0x and a matmul part
of 1.57x, between the two. The matmul part is kept and printed as a diagnostic. A profile that
recorded only the whole probe (`host_probe_s`, older files) rescales the same terms by its
one ratio. Contention ratios and stop lengths are ratios and counts: unchanged.
Pure: the measuring lives in `yatt.profiling.hostcheck`.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from .costmodel import Efficiency
from .profile_io import EngineTable, ModelTables, Profile, ProfileTables

# A ratio outside [1 / HOST_RATIO_BAND, HOST_RATIO_BAND] says the profile was made on a
# different host (or one far busier): a profiling host drifted 0.91-1.07x between its
# own runs (docs/fidelity.md, 2026-12-05), so 1.18x (0.85x) is beyond that
# with margin, while the 11-15% of another machine of the same kind stays a rescale.
HOST_RATIO_BAND = 1.18

# the trace meta keys of the probe timed before a run, and of the machine it was timed on
RECORD_KEYS = ("host_probe_python_s", "host_probe_matmul_s")
HOST_ID_KEY = "host_id"


@dataclass(frozen=True)
class HostProbe:
    """The host probe timed now: medians of its two parts, seconds, and the machine (and
    boot) it was timed on (`yatt.profiling.hostcheck.machine_id`; '' = not known)."""

    python_s: float
    matmul_s: float
    host_id: str = ""

    @property
    def total_s(self) -> float:
        return self.python_s + self.matmul_s

    @classmethod
    def from_parts(cls, parts: Sequence[tuple[float, float]], host_id: str = "") -> "HostProbe":
        """The medians of the probe's (Python, matmul) samples timed on `host_id`."""
        return cls(python_s=statistics.median(a for a, _ in parts),
                   matmul_s=statistics.median(b for _, b in parts), host_id=host_id)

    def record(self) -> dict[str, Any]:
        """The fields a run's trace keeps (`exec.runner.run_plan(host_probe=...)`)."""
        out: dict[str, Any] = {RECORD_KEYS[0]: round(self.python_s, 6),
                               RECORD_KEYS[1]: round(self.matmul_s, 6)}
        if self.host_id:
            out[HOST_ID_KEY] = self.host_id
        return out

    @classmethod
    def from_record(cls, extra: Mapping[str, Any]) -> Optional["HostProbe"]:
        """The probe a trace's meta recorded (`record`); None where it recorded none."""
        try:
            a, b = (float(extra[k]) for k in RECORD_KEYS)
        except (KeyError, TypeError, ValueError):
            return None
        host = extra.get(HOST_ID_KEY)
        return (cls(python_s=a, matmul_s=b, host_id=host if isinstance(host, str) else "")
                if a > 0 and b > 0 else None)



@dataclass(frozen=True)
class HostRatios:
    """Now over profile time (> 1: this host runs slower than the profiled one)."""

    whole: float            # the whole probe
    interpreter: float      # interpreter-bound terms follow this
    compute: float          # the model tables follow this (the interpreter part when split)
    matmul: Optional[float] = None   # the matmul part alone (None: the profile has no parts)

    @property
    def split(self) -> bool:
        """Whether the profile recorded the probe's parts (two ratios, not one)."""
        return self.matmul is not None

    def outside_band(self, band: float = HOST_RATIO_BAND) -> bool:
        return any(not 1.0 / band <= r <= band for r in (self.whole, self.interpreter))


def host_ratios(tables: ProfileTables, now: HostProbe) -> Optional[HostRatios]:
    """The ratios of `now` to the probe the profile recorded; None where it recorded none
    (or `now` timed nothing)."""
    if tables.host_probe_s <= 0 or now.total_s <= 0:
        return None
    whole = now.total_s / tables.host_probe_s
    if tables.host_probe_python_s > 0 and tables.host_probe_matmul_s > 0:
        py = now.python_s / tables.host_probe_python_s
        return HostRatios(whole=whole, interpreter=py, compute=py,
                          matmul=now.matmul_s / tables.host_probe_matmul_s)
    return HostRatios(whole=whole, interpreter=whole, compute=whole)


def own_drift(tables: ProfileTables, now: HostProbe, r: HostRatios,
              band: float = HOST_RATIO_BAND) -> bool:
    """Whether `now` was timed on the machine, in the boot, that made the profile and the
    whole probe's ratio stays inside the band: then it is this host's own drift, which the
    profile's tables (medians over minutes of measuring) average better than a few seconds
    of probe do, and the profile is kept as measured. On one shared VM the probe's Python
    part ran at two speeds about 2x apart and its 3-second median flipped between them
    (x0.56-x1.26 of a quick profile made there minutes before), while the runs did not
    follow: rescaling that quick profile by the probe took its median error from 5.9% to 28%
    (docs/fidelity.md). So the whole probe, not its Python part alone, says whether the host
    moved; past the band it is rescaled, as a move beyond drift."""
    return (bool(tables.host_id) and tables.host_id == now.host_id
            and 1.0 / band <= r.whole <= band)


def _rows(rows: tuple, r: float) -> tuple:
    """Table rows with their last column (seconds) times r."""
    return tuple(tuple(row[:-1]) + (round(row[-1] * r, 6),) for row in rows)


def _engine(e: Optional[EngineTable], r: HostRatios) -> Optional[EngineTable]:
    if e is None:
        return None
    # a teardown's seconds (stop_s, a restart row's last column) stay as measured
    return dataclasses.replace(
        e, start_s=round(e.start_s * r.interpreter, 6),
        decode=_rows(e.decode, r.compute), prefill=_rows(e.prefill, r.compute),
        join=_rows(e.join, r.compute), call=_rows(e.call, r.interpreter),
        restart=tuple((k, round(a * r.interpreter, 6), b) for k, a, b in e.restart))


def _model(m: ModelTables, r: HostRatios) -> ModelTables:
    return dataclasses.replace(
        m, train=_rows(m.train, r.compute), logprob=_rows(m.logprob, r.compute),
        train_tp=_rows(m.train_tp, r.compute), train_dp=_rows(m.train_dp, r.compute),
        engine=_engine(m.engine, r), weight_sync_s=round(m.weight_sync_s * r.interpreter, 6),
        sync=_rows(m.sync, r.interpreter))


def rescale_profile(profile: Profile, r: HostRatios, now: HostProbe,
                    where: str = "this host") -> Profile:
    """`profile` with its measured seconds times the ratio of their kind, and `now` as its
    recorded probe (rescaling the result again by a probe equal to `now` changes nothing);
    `where` names the host `now` was timed on in the profile's source line."""
    t = profile.tables
    if t is None:
        return profile
    tables = dataclasses.replace(
        t, rpc_s=round(t.rpc_s * r.interpreter, 6), handoff_s=round(t.handoff_s * r.interpreter, 6),
        transfer=_rows(t.transfer, r.interpreter),
        models={name: _model(m, r) for name, m in t.models.items()},
        host_probe_s=round(now.total_s, 6),
        host_probe_python_s=round(now.python_s, 6) if r.split else 0.0,
        host_probe_matmul_s=round(now.matmul_s, 6) if r.split else 0.0, host_id=now.host_id)
    e: Efficiency = profile.efficiency
    # switch_overhead_s is the measured teardown (`yatt profile`): as measured, too
    eff = dataclasses.replace(e, engine_start_s=e.engine_start_s * r.interpreter,
                              sync_overhead_s=e.sync_overhead_s * r.interpreter)
    return dataclasses.replace(profile, tables=tables, efficiency=eff,
                               source=f"{profile.source}; {ratio_text(r, where)}")


def drift_line(r: HostRatios) -> str:
    """One line: the profile was made on this machine and the probe's ratio is its drift."""
    return (f"host check: the profile was made on this machine since its last boot; the probe "
            f"ran in {r.whole:.2f}x its profile-time seconds (interpreter x{r.interpreter:.2f}), "
            f"this host's own drift, inside x{1 / HOST_RATIO_BAND:.2f}-x{HOST_RATIO_BAND:.2f}: "
            f"the profile's times as measured")


def for_host(profile: Profile, now: Optional[HostProbe]) -> tuple[Profile, Optional[HostRatios]]:
    """(`profile` as `yatt plan|run` predict with it on the host that timed `now`, the ratios
    applied): rescaled, or as measured with None where the profile or `now` has no probe or
    `now` is the profile's own machine drifting (`own_drift`)."""
    t = profile.tables
    r = host_ratios(t, now) if now is not None and t is not None else None
    if r is None or own_drift(t, now, r):
        return profile, None
    return rescale_profile(profile, r, now), r


def ratio_text(r: HostRatios, where: str = "this host") -> str:
    """The ratios in a few words."""
    if r.split:
        return (f"rescaled to {where}: probe x{r.whole:.2f} (interpreter x{r.interpreter:.2f}, "
                f"matmul x{r.matmul:.2f})")
    return f"rescaled to {where}: probe x{r.whole:.2f}"


def host_line(r: HostRatios) -> str:
    """One line: what the probe said and that the profile's times follow it."""
    how = (f"every term but engine teardown x{r.interpreter:.2f}, the probe's interpreter part "
           f"(its matmul part: x{r.matmul:.2f})" if r.split
           else "every term but engine teardown by that ratio")
    return (f"host check: this host ran the profile's probe in {r.whole:.2f}x its profile-time "
            f"seconds; the profile's times are rescaled: {how}")


def refresh_command(config: str, device: str = "cpu") -> str:
    """The `yatt profile` command that re-measures a profile for `config` on this host."""
    return f"yatt profile {config} --device {device} --quick -o profile.yaml"


def stale_line(r: HostRatios, config: str, device: str = "cpu",
               band: float = HOST_RATIO_BAND) -> Optional[str]:
    """One line when the ratio says the profile was made on another host (outside
    [1/band, band]); None inside it."""
    if not r.outside_band(band):
        return None
    what = (f"probe x{r.whole:.2f}" if not 1.0 / band <= r.whole <= band
            else f"its interpreter part x{r.interpreter:.2f}")
    return (f"host check: the profile was made on a different host, or this one is far busier "
            f"now ({what}, outside x{1 / band:.2f}-x{band:.2f}); refresh it: "
            f"`{refresh_command(config, device)}` and pass --profile profile.yaml")
