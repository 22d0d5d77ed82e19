"""Fit the analytic cost model's efficiency coefficients to recorded traces.

Why: the roofline model's `Efficiency` factors (MFU, bandwidth efficiencies, fixed
overheads) default to public numbers; a real cluster differs. A recorded trace says how
long each phase took for the samples it actually generated, so we can choose the
coefficients that make the simulator reproduce it, and write them as a profile that
`yatt plan --profile` and `yatt replay --profile` use.

Method: the measurements are the busy seconds of each (step, phase, role) of each trace
(`Trace.phase_role_busy`). For a candidate Efficiency, every trace's in-sample steps are
re-simulated once, with the recorded sample lengths, under the trace's own plan; the
residuals are relative errors per measurement. `scipy.optimize.least_squares` (trf,
bounded) minimises them. Parameters are normalised to their starting values, and
efficiency fractions are fitted as their inverses (phase times are linear in 1/eff), so
Gauss-Newton converges in a few iterations. Only coefficients that some measured phase
depends on are fitted; the last step(s) of each trace are held out and reported apart.

`contention_from_traces` fits the profiled model's host-contention ratios instead (measured
over contention-free replayed time per phase and busy-device count); `calibrate_contention`
writes them into a tables profile (`yatt calibrate TRACE... --profile P`), and
`bench/fidelity.py --contention traces-loo` uses it leave-one-workload-out.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Optional, Sequence

import numpy as np
from scipy.optimize import least_squares

from yatt.core.costmodel import CostModel, DelegatingCostModel
from yatt.core.errors import InputError
from yatt.core.limits import check_work, sim_requests
from yatt.core.release import ReleaseAction
from yatt.core.roles import Phase, Role
from yatt.core.trace import Trace

from .costmodel import AnalyticCostModel, Efficiency
from .profile_io import Profile
from .replay import sample_steps, simulate_steps

Key = tuple[int, Phase, Role]
Progress = Callable[[int, str], None]


class Coef(str, Enum):
    """The Efficiency fields calibrate fits (values are the field names)."""

    TRAIN_MFU = "train_mfu"
    PREFILL_MFU = "prefill_mfu"
    DECODE_BW_EFF = "decode_bw_eff"
    DECODE_STEP_OVERHEAD = "decode_step_overhead_s"
    HOST_LINK_EFF = "host_link_eff"
    SWITCH_OVERHEAD = "switch_overhead_s"
    ENGINE_START = "engine_start_s"
    COMM_EFF = "comm_eff"
    SYNC_OVERHEAD = "sync_overhead_s"


class Kind(Enum):
    FRACTION = "fraction"  # in (0, 1]; fitted as 1/x
    SECONDS = "seconds"    # >= 0


KIND: dict[Coef, Kind] = {
    Coef.TRAIN_MFU: Kind.FRACTION, Coef.PREFILL_MFU: Kind.FRACTION,
    Coef.DECODE_BW_EFF: Kind.FRACTION, Coef.HOST_LINK_EFF: Kind.FRACTION,
    Coef.COMM_EFF: Kind.FRACTION, Coef.DECODE_STEP_OVERHEAD: Kind.SECONDS,
    Coef.SWITCH_OVERHEAD: Kind.SECONDS, Coef.ENGINE_START: Kind.SECONDS,
    Coef.SYNC_OVERHEAD: Kind.SECONDS,
}
# The phases whose duration a coefficient drives (and so that can identify it).
SEEN_BY: dict[Coef, frozenset[Phase]] = {
    Coef.TRAIN_MFU: frozenset({Phase.TRAIN, Phase.REF_LOGPROB, Phase.OLD_LOGPROB}),
    Coef.PREFILL_MFU: frozenset({Phase.ROLLOUT, Phase.GENRM}),
    Coef.DECODE_BW_EFF: frozenset({Phase.ROLLOUT, Phase.GENRM}),
    Coef.DECODE_STEP_OVERHEAD: frozenset({Phase.ROLLOUT, Phase.GENRM}),
    Coef.HOST_LINK_EFF: frozenset({Phase.OFFLOAD, Phase.RELOAD}),
    Coef.SWITCH_OVERHEAD: frozenset({Phase.OFFLOAD, Phase.RELOAD}),
    Coef.ENGINE_START: frozenset({Phase.RELOAD}),
    Coef.COMM_EFF: frozenset({Phase.WEIGHT_SYNC}),
    Coef.SYNC_OVERHEAD: frozenset({Phase.WEIGHT_SYNC}),
}
# Upper bounds for the SECONDS coefficients (lower bound 0); fractions live in [0.02, 1].
SECONDS_MAX: dict[Coef, float] = {Coef.DECODE_STEP_OVERHEAD: 0.2, Coef.SWITCH_OVERHEAD: 120.0,
                                  Coef.ENGINE_START: 900.0, Coef.SYNC_OVERHEAD: 120.0}
FRACTION_MIN = 0.02
MIN_MEASURED_S = 1e-4  # shorter busy times are timer noise, not signal


@dataclass(frozen=True)
class PhaseError:
    """Mean absolute relative error of one phase's busy time, over its measurements."""

    phase: Phase
    before: float     # in sample, starting coefficients
    in_sample: float  # in sample, fitted
    held_out: float   # held-out steps, fitted (NaN when none)
    n_in: int
    n_out: int


@dataclass(frozen=True)
class Calibration:
    efficiency: Efficiency
    start: Efficiency
    fitted: tuple[Coef, ...]
    skipped: tuple[tuple[Coef, str], ...]  # not fitted, and why
    errors: tuple[PhaseError, ...]
    points_in: int
    points_out: int
    evaluations: int
    seconds: float
    hardware: str

    def profile(self, source: str) -> Profile:
        fit: dict[str, float] = {}
        for e in self.errors:
            fit[f"in_sample.{e.phase.value}"] = round(e.in_sample, 5)
            if e.n_out:
                fit[f"held_out.{e.phase.value}"] = round(e.held_out, 5)
        fitted = {c.value: float(f"{getattr(self.efficiency, c.value):.6g}") for c in self.fitted}
        return Profile(efficiency=self.efficiency.with_(**fitted), hardware=self.hardware,
                       source=source, fit_error=fit)


@dataclass(frozen=True)
class _Data:
    """One trace's measurements, split into in-sample and held-out steps."""

    trace: Trace
    steps_in: tuple[int, ...]
    steps_out: tuple[int, ...]
    keys_in: tuple[Key, ...]
    keys_out: tuple[Key, ...]
    meas_in: np.ndarray
    meas_out: np.ndarray


def _split(trace: Trace, holdout: int) -> _Data:
    steps = sample_steps(trace)
    k = holdout if len(steps) > holdout else 0
    s_in, s_out = steps[:len(steps) - k], steps[len(steps) - k:]
    busy = trace.phase_role_busy()
    fittable = frozenset().union(*SEEN_BY.values())

    def pick(ss: Sequence[int]) -> tuple[tuple[Key, ...], np.ndarray]:
        keys = tuple(sorted((key for key, v in busy.items() if key[0] in ss and key[1] in fittable
                             and v > MIN_MEASURED_S), key=lambda x: (x[0], x[1].value, x[2].value)))
        return keys, np.array([busy[x] for x in keys], float)

    ki, mi = pick(s_in)
    ko, mo = pick(s_out)
    return _Data(trace, tuple(s_in), tuple(s_out), ki, ko, mi, mo)


def choose_coefficients(traces: Sequence[Trace], phases: set[Phase]) -> tuple[list[Coef], list[tuple[Coef, str]]]:
    """Coefficients the measured phases can identify, and the others with the reason."""
    teardown = any(AnalyticCostModel.release_action(Role.ROLLOUT, t.meta.plan.release)
                   is ReleaseAction.TEARDOWN for t in traces)
    fit, skip = [], []
    for c in Coef:
        seen = SEEN_BY[c] & phases
        if not seen:
            skip.append((c, "no " + "/".join(sorted(p.value for p in SEEN_BY[c])) + " spans"))
        elif c is Coef.ENGINE_START and not teardown:
            skip.append((c, "no engine re-creation (release is not teardown)"))
        else:
            fit.append(c)
    return fit, skip


def _predict(d: _Data, eff: Efficiency, steps: Sequence[int], keys: Sequence[Key]) -> np.ndarray:
    plan = d.trace.meta.plan
    cost = AnalyticCostModel.for_experiment(plan.experiment, eff)
    busy = simulate_steps(d.trace, plan, cost, steps).phase_role_busy()
    return np.array([busy.get(k, 0.0) for k in keys], float)


def calibrate(traces: Sequence[Trace], *, start: Optional[Efficiency] = None, holdout: int = 1,
              progress: Optional[Progress] = None, max_iterations: int = 30) -> Calibration:
    """Fit Efficiency coefficients to `traces` (all from one GPU kind). See module doc."""
    t0 = time.perf_counter()
    if not traces:
        raise InputError("no traces given", field="TRACE")
    gpus = sorted({t.meta.plan.cluster.gpu.name for t in traces})
    if len(gpus) > 1:
        raise InputError(f"traces come from different GPU kinds ({', '.join(gpus)}); allowed: "
                         "traces from one GPU kind per profile", field="TRACE")
    start = start or Efficiency()
    data = [_split(t, holdout) for t in traces]
    phases = {k[1] for d in data for k in d.keys_in}
    coefs, skipped = choose_coefficients(traces, phases)
    m_in = sum(len(d.keys_in) for d in data)
    if not coefs:
        raise InputError("the traces have no phase this calibration can fit; allowed: traces "
                         "with rollout/genrm/train/offload/reload/weight_sync spans", field="span")
    if m_in < len(coefs):
        raise InputError(
            f"calibrate needs at least {len(coefs)} phase measurements to fit {len(coefs)} "
            f"coefficients ({', '.join(c.value for c in coefs)}) (have {m_in}, from "
            f"{sum(len(d.steps_in) for d in data)} in-sample steps): add steps or traces",
            field="TRACE")
    # each residual re-simulates every trace; a numerical Jacobian costs one per coefficient
    per_eval = sum(sim_requests(len(t.samples) / max(1, n), t.meta.plan.cluster.num_gpus, n)
                   for t in traces for n in [len({s.step for s in t.samples})])
    check_work((2 + max_iterations * (1 + len(coefs))) * per_eval, "TRACE",
               f"{max_iterations} fit iterations over {len(coefs)} coefficients",
               allowed="fewer or shorter traces")
    x0 = np.array([_encode(c, getattr(start, c.value)) for c in coefs])
    lo = np.array([_encode(c, 1.0) if KIND[c] is Kind.FRACTION else 0.0 for c in coefs]) / x0
    hi = np.array([_encode(c, FRACTION_MIN) if KIND[c] is Kind.FRACTION else SECONDS_MAX[c]
                   for c in coefs]) / x0
    z0 = np.clip(np.ones(len(coefs)), lo, hi)
    calls = {"n": 0}

    def eff_of(z: np.ndarray) -> Efficiency:
        return start.with_(**{c.value: _decode(c, v) for c, v in zip(coefs, z * x0)})

    def residuals(z: np.ndarray) -> np.ndarray:
        eff = eff_of(z)
        out = [(_predict(d, eff, d.steps_in, d.keys_in) - d.meas_in) / d.meas_in for d in data]
        calls["n"] += 1
        if progress:
            progress(calls["n"], "fitting " + ", ".join(f"{c.value}={getattr(eff, c.value):.3g}"
                                                        for c in coefs[:3]) + " ...")
        return np.concatenate(out)

    r0 = residuals(z0)
    sol = least_squares(residuals, z0, bounds=(lo, hi), method="trf", diff_step=1e-3,
                        x_scale=1.0, ftol=1e-8, xtol=1e-8, gtol=1e-10, max_nfev=max_iterations)
    eff = eff_of(sol.x)
    errors = _phase_errors(data, r0, sol.fun, eff)
    return Calibration(eff, start, tuple(coefs), tuple(skipped), errors, m_in,
                       sum(len(d.keys_out) for d in data), calls["n"], time.perf_counter() - t0,
                       gpus[0])


def _encode(c: Coef, v: float) -> float:
    if KIND[c] is Kind.FRACTION:
        return 1.0 / v
    return max(v, 1e-3 * SECONDS_MAX[c])  # a zero start would pin normalisation at zero


def _decode(c: Coef, x: float) -> float:
    if KIND[c] is Kind.FRACTION:
        return float(min(1.0, max(FRACTION_MIN, 1.0 / x)))
    return float(max(0.0, x))


def _phase_errors(data: Sequence[_Data], r0: np.ndarray, r1: np.ndarray,
                  eff: Efficiency) -> tuple[PhaseError, ...]:
    ph_in = [k[1] for d in data for k in d.keys_in]
    out_res, ph_out = [], []
    for d in data:
        if d.keys_out:
            out_res.append((_predict(d, eff, d.steps_out, d.keys_out) - d.meas_out) / d.meas_out)
            ph_out += [k[1] for k in d.keys_out]
    ro = np.concatenate(out_res) if out_res else np.zeros(0)
    rows = []
    for ph in sorted(set(ph_in) | set(ph_out), key=lambda p: list(Phase).index(p)):
        mi = np.array([p is ph for p in ph_in], bool)
        mo = np.array([p is ph for p in ph_out], bool)
        rows.append(PhaseError(ph, _mae(r0[mi]), _mae(r1[mi]), _mae(ro[mo]) if ro.size else float("nan"),
                               int(mi.sum()), int(mo.sum())))
    return tuple(rows)


def _mae(r: np.ndarray) -> float:
    return float(np.mean(np.abs(r))) if r.size else float("nan")


# ---- host contention from traces -------------------------------------------------------------
class _BusyProbe(DelegatingCostModel):
    """A cost model with no contention that records, per phase, the busy-device count the
    simulator asks about (so the fit uses the simulator's own notion of "busy")."""

    def __init__(self, cost: CostModel) -> None:
        super().__init__(cost)
        self.busy: dict[Phase, int] = {}

    def contention(self, phase: Phase, busy: int) -> float:
        self.busy[phase] = max(self.busy.get(phase, 0), busy)
        return 1.0

    def engine_contention(self, model, busy: int) -> None:
        return None   # no per-model factor either: every engine asks `contention`


def _wall(spans) -> float:
    """Length of the union of [start, end] intervals."""
    tot, end = 0.0, None
    for a, b in sorted((s.start_s, s.end_s) for s in spans):
        if end is None or a > end:
            tot += (end - start) if end is not None else 0.0
            start, end = a, b
        else:
            end = max(end, b)
    return tot + ((end - start) if end is not None else 0.0)


# which Contention field each phase informs (rollout and GenRM engines: one engine ratio)
_FIELD = {Phase.RELOAD: "reload", Phase.OFFLOAD: "offload", Phase.ROLLOUT: "decode",
          Phase.GENRM: "decode", Phase.REF_LOGPROB: "logprob", Phase.OLD_LOGPROB: "logprob",
          Phase.TRAIN: "train"}


def contention_ratios(trace: Trace, cost, skip_steps: int = 1) -> list[tuple[str, int, float]]:
    """(Contention field, busy devices, measured / contention-free predicted) per step and
    phase of one measured trace, replayed on its own sample lengths. Switches, training and
    reference passes compare per-role busy seconds; generation compares the wall time of
    each generate stage, in full colocate only: a streaming (partial colocate) stage also
    pays the queue hand-offs between engines, a different term that would be folded in."""
    from yatt.core.roles import Mode

    steps = [s for s in sample_steps(trace) if s >= skip_steps]
    if not steps:
        return []
    probe = _BusyProbe(cost)
    pred = simulate_steps(trace, trace.meta.plan, probe, steps)
    streaming = trace.meta.plan.mode is Mode.PARTIAL
    rec_b, pred_b = trace.phase_role_busy(), pred.phase_role_busy()
    out: list[tuple[str, int, float]] = []
    for st in steps:
        for (s, ph, role), m in rec_b.items():
            if s != st or ph in (Phase.ROLLOUT, Phase.GENRM) or ph not in _FIELD:
                continue
            p = pred_b.get((s, ph, role), 0.0)
            if p > 1e-3 and m > 0 and probe.busy.get(ph, 0) >= 1:
                out.append((_FIELD[ph], probe.busy[ph], m / p))
        for g in ([] if streaming else [(Phase.ROLLOUT,), (Phase.GENRM,)]):
            m = _wall([x for x in trace.spans if x.step == st and x.phase in g])
            p = _wall([x for x in pred.spans if x.step == st and x.phase in g])
            n = max(probe.busy.get(ph, 0) for ph in g)
            if p > 1e-3 and m > 0 and n >= 1:
                out.append(("decode", n, m / p))
    return out


def contention_from_traces(traces: Sequence[Trace], cost_for: Callable, skip_steps: int = 1):
    """Contention entries (profile_io.Contention) fitted to measured traces: per field and
    busy count, the median of measured / contention-free replayed time. `cost_for(trace)`
    gives the contention-free cost model of a trace (its experiment, on its host). Counts
    of one busy device are dropped (no contention by definition); fields without data stay
    1.0."""
    from .profile_io import Contention

    by: dict[int, dict[str, list[float]]] = {}
    for t in traces:
        for field, n, r in contention_ratios(t, cost_for(t), skip_steps):
            if n >= 2:
                by.setdefault(n, {}).setdefault(field, []).append(r)
    return tuple(Contention(busy=n, **{f: round(float(np.median(v)), 4) for f, v in fs.items()})
                 for n, fs in sorted(by.items()))


def at_trace_host(profile: Profile, trace: Trace) -> Profile:
    """`profile` rescaled to the host speed its run recorded (the host probe `yatt run`
    times before a run, in the trace's meta), as the planner rescales it before predicting;
    as it is where either lacks the probe. Without this, a fit to the trace would take a
    host faster or slower than at profile time for less or more contention; as it is, too,
    where the run was on the profile's own machine and boot within its drift
    (`hostscale.own_drift`), as the planner keeps it."""
    from .hostscale import HostProbe, for_host

    return for_host(profile, HostProbe.from_record(trace.meta.extra))[0]


def calibrate_contention(profile: Profile, traces: Sequence[Trace], skip_steps: int = 1) -> Profile:
    """`profile` (a tables profile) with its shared host-contention ratios fitted to
    measured traces (`contention_from_traces` against the profile's own contention-free
    model, rescaled to each run's recorded host speed: `at_trace_host`): the ratios the
    executor itself showed, in place of the profile's bench of worker actors.
    Engine-specific ratios (`engine.contention`) stay as measured."""
    import dataclasses

    from .profiled import cost_model_for

    if profile.tables is None:
        raise InputError("the profile has no tables; allowed: a `yatt profile` file (its "
                         "contention ratios are what is fitted)", field="--profile")
    free = dataclasses.replace(profile, tables=dataclasses.replace(profile.tables, contention=()))
    fit = contention_from_traces(
        traces, lambda t: cost_model_for(t.meta.plan.experiment, at_trace_host(free, t)),
        skip_steps)
    if not fit:
        raise InputError("no step after the first has a phase with 2 or more devices busy at "
                         "once; allowed: measured traces of multi-device runs with at least "
                         f"{skip_steps + 1} steps", field="TRACE")
    tables = dataclasses.replace(profile.tables, contention=fit)
    return dataclasses.replace(profile, tables=tables,
                               source=f"{profile.source}; contention fitted to {len(traces)} "
                                      "measured trace(s)")
