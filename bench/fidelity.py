"""Sim-to-real fidelity: the profiled cost model's predictions against the real executor.

For each workload in configs/fidelity/ (short responses + a 1x GenRM; long-tailed
responses + a ~8x GenRM; 16 samples per prompt + a ~25x GenRM) and each mode (full
colocate, partial colocate), this plans the best placement of that mode with the
profiled cost model (configs/profiles/cpu-local.yaml), predicts its step time with the
simulator, runs it on the real executor (`run_plan`, Ray + Megatron + vLLM) for
`--steps` steps and compares:

  predicted  a-priori simulation (the planner's view: the workload's sampled lengths,
             response length = the token budget)
  replayed   the simulator re-run on the measured sample lengths (isolates the cost
             model from the length distribution: EOS ends some responses early)
  measured   the executor's trace

Step 0 is EXCLUDED from both sides: it pays one-off process warm-up (first vLLM forward,
first HF/Megatron pass, lazy imports in workers: 10-16 s more than later steps here), which
the simulator does not model; run start-up (Ray, actors, first engine start) is outside the
steps anyway. The steps right after it still warm up (full colocate: step 1 above the mean
of steps 2-3 in every case measured), so each run takes `STEADY_STEPS` (8) steps by default
and the median over steps 1-7 is a steady step.
Step time is first span start to last span end of a step (Trace.step_times;
async, `--modes ...,async`: from the previous train end to the step's, step 0 being the
pipeline's fill on both sides); a case's step time is the MEDIAN over steps 1..N-1 on both sides (the box is shared: another
tenant's burst can triple one step); the mean-based error is reported too (`mean_err`).
Per-phase numbers are busy seconds per step, means over the same steps.
Ray nices its workers to 15 by default; on a shared box every nice-0 process of another
tenant then preempts the executor while the profile (a nice-0 process) was not, so
`--niceness 0` (RAY_worker_niceness) puts both at the same priority.

Host drift: a shared VM's speed changes between the profile's minutes and the run's
(bench/host_speed.py). Before and after each run the bench times the profile's host probe
(`microbench.host_probe`, 4 s each, nothing else running) and divides by the profile's
`host_probe_s`: `host_ratio` > 1 means the host ran slower than when it was profiled.
`drift_adjusted_err` (end to end and per phase) is the a-priori prediction times that ratio
against the measurement: a diagnostic that separates the model's error from the host's
drift, not a prediction (the ratio is only known after the run).

Three a-priori columns over the same runs (`columns` per case, `column_summary`):
  as_is     the profile as it is (the table above)
  rescaled  the profile rescaled to this host by its host probe timed just before the run
            (`yatt.planner.hostscale`: what `yatt plan|run` do before predicting); the run's
            plan is the one planned with it, as `yatt run` plans
  quick     a fresh `yatt profile --quick` of the workloads, made at the start of the bench
            (its wall time and whether it covers every term are recorded), put to the same
            probe before the run as `yatt run --profile` puts any profile: made on this
            machine since its boot, it stays as measured while the probe's ratio to its own
            stays inside the band (`hostscale.own_drift`), and is rescaled past it
            (`quick_rescaled` per case; `quick_as_is_err`: the quick profile as it is)
Each column predicts the same run's plan; per column the bench also records the plan its
own search picks and the mode it prefers. `run_line_err` per case is what `yatt run`'s own
predicted-vs-measured line reads for that run: the run's measured lengths replayed with the
host-rescaled profile, median step against median step.

It also reports, per column and workload, the planner's preferred mode (best predicted step
time over the modes run) against the measured fastest: `regret` is the chosen mode's
measured step over the fastest one's, minus 1. A choice is correct when its regret is
within CLOSE_CALL (10%, the a-priori error the cost model is held to, where `yatt plan`
prints its close-call line): two modes measured closer than that are not ordered by a
3-step run on a drifting host. `exact` says whether it picked the fastest itself.

Host contention (several single-thread CPU "devices" busy at once; `yatt.sim.contention`)
comes from `--contention`:
  profile     the profile's `contention` tables (`yatt profile` measures them), as is
  none        stripped (the model before contention was added; for comparison)
  traces-loo  fitted to the saved measured traces (`calibrate.contention_from_traces`),
              leave-one-workload-out: a workload's cases are predicted with ratios fitted
              only to the OTHER workloads' runs (needs --reuse and saved runs)
Writes bench/results/fidelity.json and fidelity.png and prints one summary line.
`--engine-tp 2` runs the cases with TP=2 rollout and GenRM engines (written by default to
fidelity-tp2.json: `--only short --modes colocate --engine-tp 2`).
`--save-traces DIR` copies the measured traces of `--save-cases` (default short/partial and
longtail/colocate) to DIR/measured-WORKLOAD-MODE.jsonl.gz with a provenance sidecar
(.provenance.json: the bench command, the plan and its YAML, host, git commit, date).
Usage: .venv/bin/python bench/fidelity.py [--steps 8] [--only short,wide] [--profile P]
                                         [--niceness 0] [--reuse] [--contention profile]
                                         [--engine-tp 1] [--quick-profile make|none|PATH]
                                         [--save-traces traces]
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import enum
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _results import host_description, write_result  # noqa: E402  (bench/ is on sys.path)
from yatt.planner.explain import CLOSE_CALL, STEADY_STEPS  # noqa: E402

WORKLOADS = ("short", "longtail", "wide")
PROBE_S = 4.0  # host probe before and after each run
OUT = ROOT / "bench" / "results"
RUNS = ROOT / "out" / "fidelity_runs"  # run directories (traces); not committed
QUICK = RUNS / "quick-profile.yaml"    # the bench's fresh `yatt profile --quick`
COLUMNS = ("as_is", "rescaled", "quick")
SAVE_CASES = "short/partial,longtail/colocate"


class ContentionSource(enum.Enum):
    PROFILE = "profile"
    NONE = "none"
    TRACES_LOO = "traces-loo"


def _with_contention(profile, entries):
    t = dataclasses.replace(profile.tables, contention=tuple(entries))
    return dataclasses.replace(profile, tables=t)


def loo_profiles(profile, names: list) -> dict:
    """Per workload: `profile` with contention fitted to the saved runs of the OTHER
    workloads (leave-one-workload-out; steps >= 1)."""
    from yatt.core.trace import Trace
    from yatt.planner.calibrate import calibrate_contention

    runs = {}
    for d in sorted(RUNS.glob("*/trace.jsonl")):
        runs.setdefault(d.parent.name.split("-")[0], []).append(Trace.read_jsonl(d))
    out = {}
    for n in names:
        train = [t for w, ts in runs.items() if w != n for t in ts]
        if not train:
            raise SystemExit(f"--contention traces-loo: no saved runs of other workloads in {RUNS}")
        out[n] = calibrate_contention(profile, train)
    return out


def _rel(pred: float, meas: float) -> float:
    return (pred - meas) / meas if meas > 0 else float("nan")


def _mean_steps(times: dict, skip: int) -> float:
    xs = [v for k, v in sorted(times.items()) if k >= skip]
    return statistics.fmean(xs) if xs else float("nan")


def _step_times(trace) -> dict:
    """Step -> seconds: an async trace's train-end to train-end step times (its per-step
    records, as `yatt.sim.metrics` reads them; the simulator and the executor write the
    same), else first span start to last span end (Trace.step_times)."""
    per = trace.meta.extra.get("steps") if isinstance(trace.meta.extra, dict) else None
    if isinstance(trace.meta.extra, dict) and trace.meta.extra.get("async") and per:
        return {int(x["step"]): float(x["step_time_s"]) for x in per}
    return trace.step_times()


def _executed(search_spec):
    """The search narrowed to what the executor runs (async: max_staleness 1)."""
    from yatt.core.runnable import executor_search

    return executor_search(search_spec)


def _median_steps(times: dict, skip: int) -> float:
    xs = [v for k, v in sorted(times.items()) if k >= skip]
    return statistics.median(xs) if xs else float("nan")


def _plan(name: str, mode, profile, engine_tp: int = 1):
    from yatt.core.config import load_experiment
    from yatt.planner.profiled import cost_model_for
    from yatt.planner.search import search

    from yatt.planner.profiled import experiment_for

    exp = load_experiment(ROOT / "configs" / "fidelity" / f"{name}.yaml")
    s = _executed(dataclasses.replace(exp.search, engine_tp_choices=(engine_tp,), modes=(mode,)))
    exp = experiment_for(dataclasses.replace(exp, search=s), profile)  # + measured stop lengths
    cost = cost_model_for(exp, profile)
    return exp, cost, search(exp, cost, top=1).best.plan


def _step_spread(trace) -> dict:
    """Per phase: how much the measured phase itself varies from step to step, the median
    over steps of |x - median| / median of its busy seconds per step (summed over roles).
    The noise floor a prediction of that phase can be held to (bench/host_speed.py)."""
    per: dict = {}
    for (s, p, _r), v in trace.phase_role_busy().items():
        per.setdefault(p.value, {}).setdefault(s, 0.0)
        per[p.value][s] += v
    out = {}
    for p, by in per.items():
        xs = list(by.values())
        med = statistics.median(xs)
        if len(xs) > 1 and med > 0:
            out[p] = round(statistics.median(abs(x - med) / med for x in xs), 4)
    return out


def _phase_busy(rows) -> dict:
    """Per phase: busy seconds per step summed over roles (phases that happen several
    times a step, like colocate's offloads, add up; concurrent roles add up on both sides)."""
    out: dict = {}
    for r in rows:
        m, p = out.get(r.phase.value, (0.0, 0.0))
        out[r.phase.value] = (m + r.recorded_s, p + r.predicted_s)
    return out


def _as_recorded(sim):
    """A simulated trace with its streaming spans shaped like the executor records them.

    In partial colocate the executor records ONE span per generating role, from the start
    of the streaming stage to that role's last finished request (a streaming GenRM span
    includes its waits for input); the simulator records each engine's busy intervals.
    Per-phase numbers compare like with like, so each step's rollout and GenRM spans are
    replaced by that one span. Colocate traces are returned unchanged."""
    from yatt.core.roles import Mode, Phase
    from yatt.core.trace import SpanRecord, Trace

    if sim.meta.plan.mode is not Mode.PARTIAL:
        return sim
    gen = (Phase.ROLLOUT, Phase.GENRM)
    spans = [x for x in sim.spans if x.phase not in gen]
    for st in sorted({x.step for x in sim.spans}):
        mine = [x for x in sim.spans if x.step == st and x.phase in gen]
        if not mine:
            continue
        t0 = min(x.start_s for x in mine)
        for ph in gen:
            xs = [x for x in mine if x.phase is ph]
            if xs:
                devs = tuple(sorted({d for x in xs for d in x.devices}))
                spans.append(SpanRecord(step=st, role=xs[0].role, phase=ph, devices=devs,
                                        start_s=t0, end_s=max(x.end_s for x in xs),
                                        tokens=sum(x.tokens for x in xs), name="streaming"))
    return Trace(sim.meta, sim.samples, tuple(spans))


def _probe_parts(seconds: float) -> list:
    from yatt.profiling import microbench as mb

    return [list(x) for x in mb.host_probe_parts(seconds)]


def rescaled_profile(profile, before: list):
    """(`profile` as `yatt plan|run` predict with it after timing the host probe `before` (a
    list of [python s, matmul s]) on this machine, the ratios applied); (None, None) where
    the profile or the probe cannot say, (profile, None) where the host check keeps it as
    measured (made on this machine, inside its drift band)."""
    from yatt.planner.hostscale import HostProbe, for_host
    from yatt.profiling.hostcheck import machine_id

    if not before or profile.tables is None:
        return None, None
    return for_host(profile, HostProbe.from_parts(before, machine_id()))


def _column(plan, name: str, mode, profile, engine_tp: int, meas, keep, steps: int, seed: int,
            meas_step: float) -> tuple[dict, object]:
    """One a-priori column: the run's plan predicted with `profile` (and its measured stop
    lengths), end to end and per phase, and the plan its own search picks; with the cost
    model."""
    from yatt.planner.replay import phase_rows
    from yatt.sim.simulate import simulate

    exp, cost, own = _plan(name, mode, profile, engine_tp)
    sim = simulate(plan, exp.workload, cost, seed=seed, steps=steps)
    pred = _median_steps(_step_times(sim), 1)
    ph = _phase_busy(phase_rows(meas, _as_recorded(sim), keep))
    return ({"predicted_step_s": round(pred, 4), "err": round(_rel(pred, meas_step), 4),
             "own_plan": own.describe(),
             "phases": {k: {"predicted_s": round(p, 4), "predicted_err": round(_rel(p, m), 4)}
                        for k, (m, p) in sorted(ph.items())}}, cost)


def run_case(name: str, mode, profile, steps: int, seed: int, reuse: bool = False,
             engine_tp: int = 1, quick=None, rescaled_out: dict | None = None) -> dict:
    """Probe the host, plan (with the profile rescaled to the probe, as `yatt run` plans),
    predict, run (or reuse a saved run with `reuse`), compare. `engine_tp`: the rollout and
    GenRM engines' TP (vLLM's own tensor parallelism); `quick`: a fresh quick profile for
    the third column; `rescaled_out` receives the rescaled profile (for the mode choice)."""
    from yatt.core.trace import Trace
    from yatt.planner.hostscale import HostProbe
    from yatt.planner.replay import phase_rows, replay
    from yatt.sim.simulate import simulate

    tag = "" if engine_tp == 1 else f"-tp{engine_tp}"
    out = RUNS / f"{name}-{mode.value}{tag}"
    probe_file = out / "host_probe.json"
    saved = json.loads(probe_file.read_text()) if reuse and probe_file.is_file() else None
    if isinstance(saved, dict):      # {"before": [[python s, matmul s], ...], "after": [...]}
        before, after = saved.get("before", []), saved.get("after", [])
    elif saved is not None:          # older runs: whole-probe seconds, before and after together
        before, after = [], [[x, 0.0] for x in saved]
    else:
        before, after = ([], []) if reuse else (_probe_parts(PROBE_S), [])
    rescaled, ratios = rescaled_profile(profile, before)
    quick_now, quick_r = rescaled_profile(quick, before) if quick is not None else (None, None)
    if rescaled_out is not None:
        rescaled_out[(name, mode.value)] = {"rescaled": rescaled, "quick": quick_now or quick}
    # the run's plan: as `yatt run` plans it (the rescaled profile where the probe allows)
    exp, cost, plan = _plan(name, mode, rescaled or profile, engine_tp)
    sim = simulate(plan, exp.workload, cost, seed=seed, steps=steps)
    pred_step = _median_steps(_step_times(sim), 1)
    no_stop = dataclasses.replace(exp.workload, stop_len=None)
    budget_step = _median_steps(_step_times(simulate(plan, no_stop, cost, seed=seed, steps=steps)), 1)
    sim_resp = [int(x.response_tokens) for x in sim.samples if x.step >= 1]
    t0 = time.time()
    load0 = os.getloadavg()[0]
    if reuse and (out / "trace.jsonl").is_file():
        trace = Trace.read_jsonl(out / "trace.jsonl")
        steps = trace.meta.steps
        wall = 0.0
    else:
        from yatt.exec.runner import run_plan

        t0 = time.time()
        trace = run_plan(plan, steps=steps, out_dir=out, seed=seed, progress=False,
                         host_probe=HostProbe.from_parts(before).record() if before else None)
        wall = time.time() - t0
        after = _probe_parts(PROBE_S)
        probe_file.write_text(json.dumps({"before": before, "after": after}) + "\n")
    probe = [a + b for a, b in before + after]
    base = profile.tables.host_probe_s if profile.tables else 0.0
    ratio = statistics.median(probe) / base if probe and base > 0 else None
    meas = Trace(trace.meta, tuple(x for x in trace.samples if x.step >= 1),
                 tuple(x for x in trace.spans if x.step >= 1))
    meas_step = _median_steps(_step_times(trace), 1)
    meas_mean = _mean_steps(_step_times(trace), 1)
    keep = [k for k in sim.steps() if k >= 1]
    columns, costs = {}, {}
    for col, prof in zip(COLUMNS, (profile, rescaled, quick_now or quick)):
        if prof is not None:
            columns[col], costs[col] = _column(plan, name, mode, prof, engine_tp, meas, keep,
                                               steps, seed, meas_step)
    if quick_now is not None:
        columns["quick"]["quick_rescaled"] = quick_r is not None
        columns["quick"]["quick_as_is_err"] = (
            _column(plan, name, mode, quick, engine_tp, meas, keep, steps, seed, meas_step)[0]["err"]
            if quick_r is not None else columns["quick"]["err"])
    rep = replay(meas, costs["as_is"])   # the replay diagnostic: the profile as it is
    # `yatt run`'s own predicted-vs-measured line: a replay of the run's lengths with the
    # profile its host check rescaled (the rescaled column's), median step against median
    run_rep = replay(meas, costs.get("rescaled", costs["as_is"]))
    run_line_err = _rel(_median_steps(_step_times(run_rep.predicted), 1), meas_step)
    pri = {k: (0.0, v["predicted_s"]) for k, v in columns["as_is"]["phases"].items()}
    phases = {}
    spread = _step_spread(meas)
    rep_rows = phase_rows(rep.recorded, _as_recorded(rep.predicted), rep.steps)
    for ph, (m, r) in sorted(_phase_busy(rep_rows).items()):
        a = pri.get(ph, (0.0, 0.0))[1]
        phases[ph] = {"measured_s": round(m, 4), "replayed_s": round(r, 4), "predicted_s": round(a, 4),
                      "replay_err": round(_rel(r, m), 4), "predicted_err": round(_rel(a, m), 4),
                      "drift_adjusted_err": None if ratio is None else round(_rel(a * ratio, m), 4),
                      "step_spread": spread.get(ph)}
    as_is_step = columns["as_is"]["predicted_step_s"]
    resp = [x.response_tokens for x in meas.samples]
    budget = exp.workload.response_len.mean()
    return {"case": f"{name}/{mode.value}" + tag.replace("-", "/"), "workload": name,
            "mode": mode.value, "engine_tp": engine_tp,
            "plan": plan.describe(), "planned_with": "rescaled" if rescaled is not None else "as_is",
            "genrm": exp.genrm.name, "steps": steps, "seed": seed,
            "excluded_steps": [0], "step0_measured_s": round(_step_times(trace).get(0, 0.0), 3),
            "measured_step_s": round(meas_step, 4), "predicted_step_s": as_is_step,
            "replayed_step_s": round(_median_steps(_step_times(rep.predicted), 1), 4),
            "measured_mean_step_s": round(meas_mean, 4),
            "err": columns["as_is"]["err"],
            "planned_step_s": round(pred_step, 4),
            "budget_only_step_s": round(budget_step, 4),
            "budget_only_err": round(_rel(budget_step, meas_step), 4),
            "replay_err": round(_rel(_median_steps(_step_times(rep.predicted), 1), meas_step), 4),
            "run_line_err": round(run_line_err, 4),
            "measured_steps_s": {str(k): round(v, 3) for k, v in sorted(_step_times(trace).items())},
            "response_tokens_mean": round(statistics.fmean(resp), 2) if resp else 0.0,
            "response_budget_mean": round(budget, 2),
            "response_predicted_mean": round(statistics.fmean(sim_resp), 2) if sim_resp else 0.0,
            "startup_s": trace.meta.extra.get("startup_s"), "run_wall_s": round(wall, 1),
            "load_avg": None if reuse else round((load0 + os.getloadavg()[0]) / 2, 2),
            "host_probe_s": round(statistics.median(probe), 6) if probe else None,
            "host_ratio": None if ratio is None else round(ratio, 4),
            "host_ratios_before": None if ratios is None else {
                "whole": round(ratios.whole, 4), "interpreter": round(ratios.interpreter, 4),
                "compute": round(ratios.compute, 4),
                "matmul": None if ratios.matmul is None else round(ratios.matmul, 4)},
            "drift_adjusted_err": None if ratio is None else round(_rel(as_is_step * ratio, meas_step), 4),
            "columns": columns, "phases": phases}


def planner_choice(name: str, profile, engine_tp: int = 1, modes=None) -> str:
    from yatt.core.config import load_experiment
    from yatt.planner.profiled import cost_model_for
    from yatt.planner.search import search

    from yatt.planner.profiled import experiment_for

    exp = load_experiment(ROOT / "configs" / "fidelity" / f"{name}.yaml")
    s = dataclasses.replace(exp.search, engine_tp_choices=(engine_tp,),
                            modes=tuple(modes) if modes else exp.search.modes)
    exp = experiment_for(dataclasses.replace(exp, search=_executed(s)), profile)
    return search(exp, cost_model_for(exp, profile), top=1).best.plan.mode.value


def plot(cases: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    ax = axes[0]
    colors = {"as_is": "tab:gray", "rescaled": "tab:blue", "quick": "tab:orange"}
    preds = []
    for col in COLUMNS:
        xs = [(c["measured_step_s"], c["columns"][col]["predicted_step_s"], c["mode"])
              for c in cases if col in c.get("columns", {})]
        preds += [y for _, y, _ in xs]
        for mode, marker in (("colocate", "o"), ("partial", "s")):
            pts = [(x, y) for x, y, m in xs if m == mode]
            if pts:
                ax.scatter([x for x, _ in pts], [y for _, y in pts], marker=marker, s=40,
                           color=colors[col], label=f"{col} ({mode})", alpha=0.8)
    for c in cases:
        ax.annotate(c["case"], (c["measured_step_s"], c["predicted_step_s"]), fontsize=6,
                    xytext=(4, 4), textcoords="offset points")
    hi = max([c["measured_step_s"] for c in cases] + preds) * 1.1
    ax.plot([0, hi], [0, hi], "k--", lw=0.8)
    ax.fill_between([0, hi], [0, hi * 0.9], [0, hi * 1.1], color="green", alpha=0.1, label="±10%")
    ax.set(xlabel="measured s/step (steps >= 1)", ylabel="predicted s/step (a priori)",
           title="Step time: as is / host-rescaled / quick profile", xlim=(0, hi), ylim=(0, hi))
    ax.legend(loc="upper left", fontsize=6)
    ax = axes[1]
    pts = [(p["measured_s"], p["replayed_s"], ph) for c in cases for ph, p in c["phases"].items()
           if p["measured_s"] > 0.01]
    for ph in sorted({x[2] for x in pts}):
        xs = [(a, b) for a, b, q in pts if q == ph]
        ax.scatter([a for a, _ in xs], [b for _, b in xs], label=ph, s=25)
    lo = min(min(a, b) for a, b, _ in pts) * 0.8
    hi = max(max(a, b) for a, b, _ in pts) * 1.25
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="measured s (busy seconds per step)",
           ylabel="replayed s", title="Per phase (replay of measured lengths)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def make_quick_profile(names: list, choice: str, reuse: bool):
    """The third column's profile: `yatt profile --quick` of the workloads, made now
    (`choice` make; under --reuse, the saved one), read from a file (`choice` a path), or
    none. Returns (profile or None, what the results record about it)."""
    from yatt.core.config import load_experiment
    from yatt.planner.coverage import missing_terms
    from yatt.planner.profile_io import load_profile

    exps = [load_experiment(ROOT / "configs" / "fidelity" / f"{n}.yaml") for n in names]
    if choice == "none":
        return None, None
    wall = None
    if choice != "make":
        path = Path(choice)
        prof = load_profile(path)
    elif reuse:
        if not QUICK.is_file():
            return None, None
        path, prof = QUICK, load_profile(QUICK)
    else:
        # made as a user makes it: the `yatt profile --quick` command in its own process
        # (its base is the shipped profile), not inside this bench's process
        QUICK.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "yatt.cli", "profile",
               *[str(ROOT / "configs" / "fidelity" / f"{n}.yaml") for n in names],
               "--device", "cpu", "--quick", "-o", str(QUICK), "--no-progress"]
        t0 = time.time()
        subprocess.run(cmd, cwd=ROOT, check=True)
        wall = round(time.time() - t0, 1)
        path, prof = QUICK, load_profile(QUICK)
    return prof, {"path": _rel_path(path), "made_now": wall is not None, "wall_s": wall,
                  "source": prof.source,
                  "missing_terms": {e.name: list(missing_terms(prof, e)) for e in exps}}


def _rel_path(p) -> str:
    p = Path(p).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def column_summary(cases: list, choices: dict) -> dict:
    """Per column: end-to-end and per-phase a-priori error over the cases (phases with more
    than 0.05 s per step measured), and its mode choice."""
    out = {}
    for col in COLUMNS:
        cs = [c for c in cases if col in c.get("columns", {})]
        if not cs:
            continue
        errs = [abs(c["columns"][col]["err"]) for c in cs]
        ph = [abs(x["predicted_err"]) for c in cs for k, x in c["columns"][col]["phases"].items()
              if c["phases"].get(k, {}).get("measured_s", 0.0) > 0.05]
        ch = choices.get(col, [])
        out[col] = {"cases": len(cs),
                    "median_abs_err": round(statistics.median(errs), 4),
                    "max_abs_err": round(max(errs), 4),
                    "phase_median_abs_err": round(statistics.median(ph), 4) if ph else None,
                    "phase_max_abs_err": round(max(ph), 4) if ph else None,
                    "mode_choice": ch,
                    "mode_choice_correct": all(m["correct"] for m in ch)}
    return out


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=30, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def save_traces(cases: list, dest: Path, chosen: list, command: str) -> list:
    """Copy the chosen cases' measured traces to DEST/measured-WORKLOAD-MODE.jsonl.gz, each
    with a .provenance.json sidecar; returns the files written."""
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for c in cases:
        if c["case"] not in chosen:
            continue
        tag = "" if c["engine_tp"] == 1 else f"-tp{c['engine_tp']}"
        run = RUNS / f"{c['workload']}-{c['mode']}{tag}"
        stem = f"measured-{c['workload']}-{c['mode']}{tag}"
        gz = dest / f"{stem}.jsonl.gz"
        with open(run / "trace.jsonl", "rb") as f, gzip.GzipFile(gz, "wb", mtime=0) as g:
            shutil.copyfileobj(f, g)
        plan_file = run / "plan.yaml"
        side = {
            "trace": gz.name, "source": "measured",
            "recorded_by": "bench/fidelity.py: yatt.exec.runner.run_plan, the executor `yatt run` runs",
            "command": command,
            "rerun": f"yatt run PLAN.yaml --steps {c['steps']} --seed {c['seed']} "
                     "(PLAN.yaml: plan_yaml below)",
            "config": f"configs/fidelity/{c['workload']}.yaml", "mode": c["mode"],
            "plan": c["plan"], "plan_yaml": plan_file.read_text() if plan_file.is_file() else None,
            "steps": c["steps"], "seed": c["seed"], "excluded_steps": c["excluded_steps"],
            "host": host_description(),
            "git_commit": _git("rev-parse", "HEAD"),
            "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "measured_step_s": c["measured_step_s"],
            "predicted_step_s": {k: v["predicted_step_s"] for k, v in c["columns"].items()},
            "host_ratios_before": c.get("host_ratios_before"),
            "not_recorded": "GPU or driver (CPU devices: one thread each); other tenants' load "
                            "beyond load_avg",
            "load_avg": c.get("load_avg"),
        }
        side_path = dest / f"{stem}.provenance.json"
        side_path.write_text(json.dumps(side, indent=2) + "\n")
        written += [gz, side_path]
    return written


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=STEADY_STEPS,
                    help="steps per run (step 0 excluded; fewer than the default read the warm-up "
                         "of the steps after step 0 as model error)")
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--modes", default="colocate,partial")
    ap.add_argument("--profile", default=str(ROOT / "configs" / "profiles" / "cpu-local.yaml"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engine-tp", type=int, default=1, choices=(1, 2),
                    help="TP of the rollout and GenRM engines (2: vLLM's tensor parallelism "
                         "over both devices; the profile's engine tables are TP=1, so the "
                         "cost model scales them analytically)")
    ap.add_argument("--out", default=None,
                    help="results file (default fidelity.json; fidelity-tp2.json at --engine-tp 2; "
                         "a bare name goes to bench/results/)")
    ap.add_argument("--niceness", type=int, default=0,
                    help="RAY_worker_niceness for the runs (default 0, the profile's priority; "
                         "Ray's own default is 15)")
    ap.add_argument("--reuse", action="store_true",
                    help="re-analyse the saved runs in out/fidelity_runs (no execution)")
    ap.add_argument("--contention", default=ContentionSource.PROFILE.value,
                    choices=[c.value for c in ContentionSource],
                    help="host-contention ratios: the profile's (default), none, or fitted "
                         "leave-one-workload-out to the saved runs (with --reuse)")
    ap.add_argument("--quick-profile", default="make",
                    help="the third column: make (a fresh `yatt profile --quick` at the start; "
                         "with --reuse the saved one), none, or a profile file")
    ap.add_argument("--save-traces", default=None, metavar="DIR",
                    help="copy the measured traces of --save-cases to DIR/measured-*.jsonl.gz "
                         "with provenance sidecars (e.g. traces)")
    ap.add_argument("--save-cases", default=SAVE_CASES,
                    help=f"cases whose traces --save-traces copies (default {SAVE_CASES})")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = str(OUT / {1: "fidelity.json", 2: "fidelity-tp2.json"}[args.engine_tp])
    elif Path(args.out).name == args.out:
        args.out = str(OUT / args.out)
    source = ContentionSource(args.contention)
    if source is ContentionSource.TRACES_LOO and not args.reuse:
        ap.error("--contention traces-loo needs --reuse (it fits to the saved runs)")
    from yatt.core.roles import Mode
    from yatt.exec.env import apply_local_env, ensure_ray
    from yatt.planner.profile_io import load_profile

    profile = load_profile(args.profile)
    names = [n for n in args.only.split(",") if n]
    if source is ContentionSource.NONE:
        profiles = {n: _with_contention(profile, ()) for n in names}
    elif source is ContentionSource.TRACES_LOO:
        profiles = loo_profiles(profile, names)
    else:
        profiles = {n: profile for n in names}
    modes = [Mode(m) for m in args.modes.split(",") if m]
    # before Ray starts: `yatt profile` starts and stops its own sessions
    quick, quick_info = make_quick_profile(names, args.quick_profile, args.reuse)
    apply_local_env(True)
    if not args.reuse:
        import torch
        torch.set_num_threads(1)   # the host probe runs here, as `yatt profile` ran it
    if args.niceness is not None:  # must be set before Ray starts (the raylet reads it)
        os.environ["RAY_worker_niceness"] = str(args.niceness)
    started = False if args.reuse else ensure_ray(2, None, True)  # one session for every case
    cases: list = []
    rescaled: dict = {}
    try:
        for n in names:
            for m in modes:
                c = run_case(n, m, profiles[n], args.steps, args.seed, args.reuse, args.engine_tp,
                             quick, rescaled)
                cases.append(c)
                cols = " ".join(f"{k} {v['predicted_step_s']:6.2f} ({v['err'] * 100:+.1f}%)"
                                for k, v in c["columns"].items())
                print(f"{c['case']:22s} measured {c['measured_step_s']:6.2f} predicted: {cols}; "
                      f"replayed {c['replayed_step_s']:6.2f} ({c['replay_err'] * 100:+.1f}%)",
                      flush=True)
    finally:
        if started:
            import ray
            ray.shutdown()
    by_col: dict = {col: [] for col in COLUMNS}
    for n in names:
        by = {c["mode"]: c for c in cases if c["workload"] == n}
        if len(by) < 2:
            continue
        faster = min(by, key=lambda k: by[k]["measured_step_s"])
        slow, fast = max(x["measured_step_s"] for x in by.values()), by[faster]["measured_step_s"]
        # the rescaled and quick columns: rescaled by the probe before the workload's first run
        first = next((rescaled[(n, m.value)] for m in modes if (n, m.value) in rescaled), {})
        for col, prof in zip(COLUMNS, (profiles[n], first.get("rescaled"),
                                       first.get("quick", quick))):
            if prof is None:
                continue
            chosen = planner_choice(n, prof, args.engine_tp, modes)
            # what the choice costs: its measured step over the fastest one's; a choice
            # inside the cost model's a-priori error (where `yatt plan` prints its
            # close-call line) is not a wrong one, as measurement cannot order those modes
            regret = by[chosen]["measured_step_s"] / fast - 1 if chosen in by else float("inf")
            by_col[col].append({"workload": n, "planner_mode": chosen, "measured_faster": faster,
                                "measured_gap": round(slow / fast - 1, 4),
                                "regret": round(regret, 4), "exact": chosen == faster,
                                "correct": regret <= CLOSE_CALL})
    choices = by_col["as_is"]
    summary = column_summary(cases, by_col)
    errs = [abs(c["err"]) for c in cases]
    rerrs = [abs(c["replay_err"]) for c in cases]
    lerrs = [abs(c["run_line_err"]) for c in cases if c.get("run_line_err") is not None]
    big = [p for c in cases for p in c["phases"].values() if p["measured_s"] > 0.05]
    phase_errs = [abs(p["replay_err"]) for p in big]
    phase_pred_errs = [abs(p["predicted_err"]) for p in big]
    spreads = [p["step_spread"] for p in big if p.get("step_spread") is not None]
    no_stop = [abs(c["budget_only_err"]) for c in cases if "budget_only_err" in c]
    drift = [abs(c["drift_adjusted_err"]) for c in cases if c.get("drift_adjusted_err") is not None]
    drift_ph = [abs(p["drift_adjusted_err"]) for p in big if p.get("drift_adjusted_err") is not None]
    res = {"engine_tp": args.engine_tp, "profile": str(Path(args.profile).relative_to(ROOT)) if Path(args.profile).is_relative_to(ROOT)
           else args.profile, "contention_source": source.value,
           "contention": {n: [dataclasses.asdict(c) for c in p.tables.contention]
                          for n, p in profiles.items()},
           "reused_runs": bool(args.reuse),
           "excluded_steps": [0], "cases": cases, "mode_choice": choices,
           "median_abs_err": round(statistics.median(errs), 4) if errs else None,
           "max_abs_err": round(max(errs), 4) if errs else None,
           "replay_median_abs_err": round(statistics.median(rerrs), 4) if rerrs else None,
           "replay_max_abs_err": round(max(rerrs), 4) if rerrs else None,
           "run_line_median_abs_err": round(statistics.median(lerrs), 4) if lerrs else None,
           "run_line_max_abs_err": round(max(lerrs), 4) if lerrs else None,
           "phase_median_abs_err": round(statistics.median(phase_errs), 4) if phase_errs else None,
           "phase_max_abs_err": round(max(phase_errs), 4) if phase_errs else None,
           "phase_predicted_median_abs_err": round(statistics.median(phase_pred_errs), 4)
           if phase_pred_errs else None,
           "phase_step_spread_median": round(statistics.median(spreads), 4) if spreads else None,
           "budget_only_median_abs_err": round(statistics.median(no_stop), 4) if no_stop else None,
           "budget_only_max_abs_err": round(max(no_stop), 4) if no_stop else None,
           "host_ratios": [c.get("host_ratio") for c in cases],
           "drift_adjusted_median_abs_err": round(statistics.median(drift), 4) if drift else None,
           "drift_adjusted_max_abs_err": round(max(drift), 4) if drift else None,
           "drift_adjusted_phase_median_abs_err": round(statistics.median(drift_ph), 4)
           if drift_ph else None,
           "ray_worker_niceness": os.environ.get("RAY_worker_niceness", "ray default (15)"),
           "mode_choice_correct": all(c["correct"] for c in choices),
           "columns": list(COLUMNS), "column_summary": summary, "quick_profile": quick_info,
           "targets": {"rescaled_median_abs_err": 0.10, "quick_median_abs_err": 0.05,
                       "phase_median_abs_err": 0.15}}
    if args.save_traces:
        chosen = [x for x in args.save_cases.split(",") if x]
        saved = save_traces(cases, Path(args.save_traces), chosen,
                            " ".join(["python", "bench/fidelity.py"] + list(
                                sys.argv[1:] if argv is None else argv)))
        res["saved_traces"] = [_rel_path(p) for p in saved]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_result(out, res, indent=2)
    if cases:
        plot(cases, out.with_suffix(".png"))
    print(f"fidelity: {len(cases)} cases, median |err| {res['median_abs_err']}, max |err| "
          f"{res['max_abs_err']} (replay median {res['replay_median_abs_err']}); per phase "
          f"median {res['phase_median_abs_err']} (step-to-step spread "
          f"{res['phase_step_spread_median']}); drift-adjusted median "
          f"{res['drift_adjusted_median_abs_err']}, per phase "
          f"{res['drift_adjusted_phase_median_abs_err']}; mode choice "
          f"correct: {res['mode_choice_correct']} -> {out}")
    for col, v in summary.items():
        print(f"  {col:9s} median |err| {v['median_abs_err']}, max {v['max_abs_err']}; per phase "
              f"median {v['phase_median_abs_err']}; mode choice correct: {v['mode_choice_correct']}")
    return res


if __name__ == "__main__":
    main()
