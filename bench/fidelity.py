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
steps anyway. Step time is first span start to last span end of a step (Trace.step_times);
a case's step time is the MEDIAN over steps 1..N-1 on both sides (the box is shared: another
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

It also reports whether the planner's preferred mode (best predicted step time over both
modes) is the measured faster one in each workload.

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
Usage: .venv/bin/python bench/fidelity.py [--steps 4] [--only short,wide] [--profile P]
                                         [--niceness 0] [--reuse] [--contention profile]
                                         [--engine-tp 1]
"""
from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _results import write_result  # noqa: E402  (bench/ holds the script: on sys.path)
WORKLOADS = ("short", "longtail", "wide")
PROBE_S = 4.0  # host probe before and after each run
OUT = ROOT / "bench" / "results"
RUNS = ROOT / "out" / "fidelity_runs"  # run directories (traces); not committed


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
    from yatt.planner.calibrate import contention_from_traces
    from yatt.planner.profiled import cost_model_for

    free = _with_contention(profile, ())
    runs = {}
    for d in sorted(RUNS.glob("*/trace.jsonl")):
        runs.setdefault(d.parent.name.split("-")[0], []).append(Trace.read_jsonl(d))
    out = {}
    for n in names:
        train = [t for w, ts in runs.items() if w != n for t in ts]
        if not train:
            raise SystemExit(f"--contention traces-loo: no saved runs of other workloads in {RUNS}")
        fit = contention_from_traces(train, lambda e: cost_model_for(e, free))
        out[n] = _with_contention(profile, fit)
    return out


def _rel(pred: float, meas: float) -> float:
    return (pred - meas) / meas if meas > 0 else float("nan")


def _mean_steps(times: dict, skip: int) -> float:
    xs = [v for k, v in sorted(times.items()) if k >= skip]
    return statistics.fmean(xs) if xs else float("nan")


def _median_steps(times: dict, skip: int) -> float:
    xs = [v for k, v in sorted(times.items()) if k >= skip]
    return statistics.median(xs) if xs else float("nan")


def _plan(name: str, mode, profile, engine_tp: int = 1):
    from yatt.core.config import load_experiment
    from yatt.planner.profiled import cost_model_for
    from yatt.planner.search import search

    from yatt.planner.profiled import experiment_for

    exp = load_experiment(ROOT / "configs" / "fidelity" / f"{name}.yaml")
    s = dataclasses.replace(exp.search, engine_tp_choices=(engine_tp,), modes=(mode,))
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


def run_case(name: str, mode, profile, steps: int, seed: int, reuse: bool = False,
             engine_tp: int = 1) -> dict:
    """Plan, predict, run (or reuse a saved run with `reuse`), compare. `engine_tp`: the
    rollout and GenRM engines' TP (vLLM's own tensor parallelism)."""
    from yatt.core.trace import Trace
    from yatt.planner.replay import phase_rows, replay
    from yatt.sim.simulate import simulate

    exp, cost, plan = _plan(name, mode, profile, engine_tp)
    tag = "" if engine_tp == 1 else f"-tp{engine_tp}"
    sim = simulate(plan, exp.workload, cost, seed=seed, steps=steps)
    pred_step = _median_steps(sim.step_times(), 1)
    # the same prediction without the stop-length (EOS) model: every response at its budget
    no_stop = dataclasses.replace(exp.workload, stop_len=None)
    budget_step = _median_steps(simulate(plan, no_stop, cost, seed=seed, steps=steps).step_times(), 1)
    sim_resp = [int(x.response_tokens) for x in sim.samples if x.step >= 1]
    out = RUNS / f"{name}-{mode.value}{tag}"
    t0 = time.time()
    load0 = os.getloadavg()[0]
    if reuse and (out / "trace.jsonl").is_file():
        trace = Trace.read_jsonl(out / "trace.jsonl")
        steps = trace.meta.steps
        probe_file = out / "host_probe.json"
        probe = json.loads(probe_file.read_text()) if probe_file.is_file() else []
        wall = 0.0
    else:
        from yatt.profiling import microbench as mb
        from yatt.exec.runner import run_plan

        probe = mb.host_probe(PROBE_S)
        t0 = time.time()
        trace = run_plan(plan, steps=steps, out_dir=out, seed=seed, progress=False)
        wall = time.time() - t0
        probe += mb.host_probe(PROBE_S)
        (out / "host_probe.json").write_text(json.dumps(probe) + "\n")
    base = profile.tables.host_probe_s if profile.tables else 0.0
    ratio = statistics.median(probe) / base if probe and base > 0 else None
    meas = Trace(trace.meta, tuple(x for x in trace.samples if x.step >= 1),
                 tuple(x for x in trace.spans if x.step >= 1))
    rep = replay(meas, cost)
    meas_step = _median_steps(trace.step_times(), 1)
    meas_mean = _mean_steps(trace.step_times(), 1)
    keep = [k for k in sim.steps() if k >= 1]
    pri = _phase_busy(phase_rows(meas, _as_recorded(sim), keep))
    phases = {}
    spread = _step_spread(meas)
    rep_rows = phase_rows(rep.recorded, _as_recorded(rep.predicted), rep.steps)
    for ph, (m, r) in sorted(_phase_busy(rep_rows).items()):
        a = pri.get(ph, (0.0, 0.0))[1]
        phases[ph] = {"measured_s": round(m, 4), "replayed_s": round(r, 4), "predicted_s": round(a, 4),
                      "replay_err": round(_rel(r, m), 4), "predicted_err": round(_rel(a, m), 4),
                      "drift_adjusted_err": None if ratio is None else round(_rel(a * ratio, m), 4),
                      "step_spread": spread.get(ph)}
    resp = [x.response_tokens for x in meas.samples]
    budget = exp.workload.response_len.mean()
    return {"case": f"{name}/{mode.value}" + tag.replace("-", "/"), "workload": name,
            "mode": mode.value, "engine_tp": engine_tp,
            "plan": plan.describe(), "genrm": exp.genrm.name, "steps": steps,
            "excluded_steps": [0], "step0_measured_s": round(trace.step_times().get(0, 0.0), 3),
            "measured_step_s": round(meas_step, 4), "predicted_step_s": round(pred_step, 4),
            "replayed_step_s": round(_median_steps(rep.predicted.step_times(), 1), 4),
            "measured_mean_step_s": round(meas_mean, 4),
            "mean_err": round(_rel(_mean_steps(sim.step_times(), 1), meas_mean), 4),
            "err": round(_rel(pred_step, meas_step), 4),
            "budget_only_step_s": round(budget_step, 4),
            "budget_only_err": round(_rel(budget_step, meas_step), 4),
            "replay_err": round(_rel(_median_steps(rep.predicted.step_times(), 1), meas_step), 4),
            "measured_steps_s": {str(k): round(v, 3) for k, v in sorted(trace.step_times().items())},
            "response_tokens_mean": round(statistics.fmean(resp), 2) if resp else 0.0,
            "response_budget_mean": round(budget, 2),
            "response_predicted_mean": round(statistics.fmean(sim_resp), 2) if sim_resp else 0.0,
            "startup_s": trace.meta.extra.get("startup_s"), "run_wall_s": round(wall, 1),
            "load_avg": None if reuse else round((load0 + os.getloadavg()[0]) / 2, 2),
            "host_probe_s": round(statistics.median(probe), 6) if probe else None,
            "host_ratio": None if ratio is None else round(ratio, 4),
            "drift_adjusted_err": None if ratio is None else round(_rel(pred_step * ratio, meas_step), 4),
            "phases": phases}


def planner_choice(name: str, profile, engine_tp: int = 1) -> str:
    from yatt.core.config import load_experiment
    from yatt.planner.profiled import cost_model_for
    from yatt.planner.search import search

    from yatt.planner.profiled import experiment_for

    exp = load_experiment(ROOT / "configs" / "fidelity" / f"{name}.yaml")
    exp = dataclasses.replace(exp, search=dataclasses.replace(exp.search,
                                                              engine_tp_choices=(engine_tp,)))
    exp = experiment_for(exp, profile)
    return search(exp, cost_model_for(exp, profile), top=1).best.plan.mode.value


def plot(cases: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    ax = axes[0]
    for c in cases:
        ax.scatter(c["measured_step_s"], c["predicted_step_s"],
                   marker="o" if c["mode"] == "colocate" else "s", s=50)
        ax.annotate(c["case"], (c["measured_step_s"], c["predicted_step_s"]), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    hi = max([c["measured_step_s"] for c in cases] + [c["predicted_step_s"] for c in cases]) * 1.1
    ax.plot([0, hi], [0, hi], "k--", lw=0.8)
    ax.fill_between([0, hi], [0, hi * 0.9], [0, hi * 1.1], color="green", alpha=0.1, label="±10%")
    ax.set(xlabel="measured s/step (steps >= 1)", ylabel="predicted s/step (profiled sim)",
           title="Step time: predicted vs measured", xlim=(0, hi), ylim=(0, hi))
    ax.legend(loc="upper left")
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


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=4, help="steps per run (step 0 excluded)")
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--modes", default="colocate,partial")
    ap.add_argument("--profile", default=str(ROOT / "configs" / "profiles" / "cpu-local.yaml"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engine-tp", type=int, default=1, choices=(1, 2),
                    help="TP of the rollout and GenRM engines (2: vLLM's tensor parallelism "
                         "over both devices; the profile's engine tables are TP=1, so the "
                         "cost model scales them analytically)")
    ap.add_argument("--out", default=None,
                    help="results file (default fidelity.json; fidelity-tp2.json at --engine-tp 2)")
    ap.add_argument("--niceness", type=int, default=0,
                    help="RAY_worker_niceness for the runs (default 0, the profile's priority; "
                         "Ray's own default is 15)")
    ap.add_argument("--reuse", action="store_true",
                    help="re-analyse the saved runs in out/fidelity_runs (no execution)")
    ap.add_argument("--contention", default=ContentionSource.PROFILE.value,
                    choices=[c.value for c in ContentionSource],
                    help="host-contention ratios: the profile's (default), none, or fitted "
                         "leave-one-workload-out to the saved runs (with --reuse)")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = str(OUT / {1: "fidelity.json", 2: "fidelity-tp2.json"}[args.engine_tp])
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
    apply_local_env(True)
    if not args.reuse:
        import torch
        torch.set_num_threads(1)   # the host probe runs here, as `yatt profile` ran it
    if args.niceness is not None:  # must be set before Ray starts (the raylet reads it)
        os.environ["RAY_worker_niceness"] = str(args.niceness)
    started = False if args.reuse else ensure_ray(2, None, True)  # one session for every case
    cases = []
    try:
        for n in names:
            for m in modes:
                c = run_case(n, m, profiles[n], args.steps, args.seed, args.reuse, args.engine_tp)
                cases.append(c)
                print(f"{c['case']:22s} measured {c['measured_step_s']:6.2f} predicted "
                      f"{c['predicted_step_s']:6.2f} ({c['err'] * 100:+.1f}%) replayed "
                      f"{c['replayed_step_s']:6.2f} ({c['replay_err'] * 100:+.1f}%)", flush=True)
    finally:
        if started:
            import ray
            ray.shutdown()
    choices = []
    for n in names:
        by = {c["mode"]: c for c in cases if c["workload"] == n}
        if len(by) < 2:
            continue
        faster = min(by, key=lambda k: by[k]["measured_step_s"])
        slow, fast = max(x["measured_step_s"] for x in by.values()), by[faster]["measured_step_s"]
        chosen = planner_choice(n, profiles[n], args.engine_tp)
        choices.append({"workload": n, "planner_mode": chosen, "measured_faster": faster,
                        "measured_gap": round(slow / fast - 1, 4), "correct": chosen == faster,
                        "counts": slow / fast - 1 > 0.10})
    errs = [abs(c["err"]) for c in cases]
    rerrs = [abs(c["replay_err"]) for c in cases]
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
           "mode_choice_correct": all(c["correct"] for c in choices if c["counts"])}
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
    return res


if __name__ == "__main__":
    main()
