"""Quick profile against the full one: `yatt profile --quick` per phase, on the same host.

Why: users should re-profile a host instead of trusting a stale profile, and they will
only if it takes minutes; the quick set (`Points.quick()`: every table, fewer points and
repetitions) is worth shipping only if its predictions stay within 15% per phase of the
full set's. This bench makes both profiles of the same experiments back to back on one
host (quick, full, quick again: the two quick ones bound its own run-to-run noise), then,
for each experiment and mode, simulates the full profile's best plan of that mode with
each profile and compares busy seconds per step per phase and the step time. No executor
runs: it compares two measurements, not a measurement with a prediction.
Each profile is measured in its own minutes of a drifting host, and `yatt plan|run` rescale
any profile to the host probe timed before they predict (`yatt.planner.hostscale`); so the
quick profile is compared as they would use it, rescaled to the full one's recorded probe,
and as measured (`*_raw`: the host's drift between the two included).
Contention: the quick profile carries the base's contention ratios, which `yatt calibrate`
fitted to measured runs, while a full profile has its own contention bench's (lower: it
misses what a real run's actors add; docs/fidelity.md). So the targets compare the
measured tables: the full profile with the quick one's contention (`cases`); `*_raw` and
`cases_raw` keep each profile's own.
The quick profile is made as `yatt profile --quick` makes it: its Ray-path terms come from
the shipped profile, rescaled (yatt.profiling.carry); so the comparison also tests carrying
them. Targets: the quick profile of all the configs together, and of the first one alone,
in <= 120 s each; per phase within 15% of the full.
Writes bench/results/quick_profile.json and prints one line. Takes about 15 minutes (the
full profile of the demo and fidelity models takes 10-12 minutes; each quick one 1-2).
Usage: .venv/bin/python bench/quick_profile.py [--configs demo-cpu,fidelity/short,...]
                                               [--full PATH] [--seed 0]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _results import write_result  # noqa: E402  (bench/ holds the script: on sys.path)
OUT = ROOT / "bench" / "results" / "quick_profile.json"
PROFILES = ROOT / "out" / "quick_profile"   # the profiles made here; not committed
CONFIGS = "demo-cpu,fidelity/short,fidelity/longtail,fidelity/wide"
PHASE_TARGET = 0.15
WALL_TARGET_S = 120.0
STEPS = 4


def _rel(path) -> str:
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def make(exps, points, path: Path, base=None):
    """(profile, wall seconds) of `yatt profile` with `points` (and `base`), saved to `path`."""
    from yatt.planner.profile_io import save_profile
    from yatt.profiling.profile import profile_experiments

    t0 = time.time()
    prof = profile_experiments(exps, "cpu", points,
                               tick=lambda what: print(f"  {path.stem}: {what}", flush=True),
                               base=base)
    wall = time.time() - t0
    path.parent.mkdir(parents=True, exist_ok=True)
    save_profile(prof, path)
    return prof, wall


def phases(exp, plan, profile, seed: int) -> tuple[float, dict]:
    """(median step time over steps >= 1, busy seconds per step per phase) of `plan`
    simulated with `profile` (its measured stop lengths too)."""
    from yatt.planner.profiled import cost_model_for, experiment_for
    from yatt.sim.simulate import simulate

    e = experiment_for(exp, profile)
    sim = simulate(plan, e.workload, cost_model_for(e, profile), seed=seed, steps=STEPS)
    steps = {k: v for k, v in sim.step_times().items() if k >= 1}
    busy: dict = {}
    for (s, p, _r), v in sim.phase_role_busy().items():
        if s >= 1:
            busy[p.value] = busy.get(p.value, 0.0) + float(v) / len(steps)
    return float(statistics.median(steps.values())), busy


def on_full_probe(full, quick):
    """`quick` rescaled to the probe `full` recorded, as `yatt plan|run` would rescale both
    to one host's probe; `quick` itself where either recorded none."""
    from yatt.planner.hostscale import HostProbe, host_ratios, rescale_profile

    t = full.tables
    if t is None or quick.tables is None or t.host_probe_python_s <= 0:
        return quick
    probe = HostProbe(python_s=t.host_probe_python_s, matmul_s=t.host_probe_matmul_s)
    r = host_ratios(quick.tables, probe)
    return quick if r is None else rescale_profile(quick, r, probe, "the full profile's host")


def with_contention_of(full, quick):
    """`full` with `quick`'s contention ratios (host-wide and each GenRM engine's), so a
    comparison of the two sees their measured tables only."""
    t, q = full.tables, quick.tables
    if t is None or q is None:
        return full
    models = {}
    for name, m in t.models.items():
        qm = q.models.get(name)
        if m.engine is not None and qm is not None and qm.engine is not None:
            m = dataclasses.replace(m, engine=dataclasses.replace(
                m.engine, contention=qm.engine.contention))
        models[name] = m
    return dataclasses.replace(full, tables=dataclasses.replace(
        t, contention=q.contention, models=models))


def compare(exps, full, quick, seed: int) -> list:
    """Per experiment and mode: the full profile's best plan, simulated with both."""
    from yatt.planner.profiled import cost_model_for, experiment_for
    from yatt.planner.search import search

    rows = []
    for exp in exps:
        for mode in exp.search.modes:
            e = experiment_for(dataclasses.replace(
                exp, search=dataclasses.replace(exp.search, modes=(mode,))), full)
            plan = search(e, cost_model_for(e, full), top=1).best.plan
            f_step, f_ph = phases(exp, plan, full, seed)
            q_step, q_ph = phases(exp, plan, quick, seed)
            ph = {k: {"full_s": round(f_ph[k], 4), "quick_s": round(q_ph.get(k, 0.0), 4),
                      "diff": round(q_ph.get(k, 0.0) / f_ph[k] - 1, 4)}
                  for k in sorted(f_ph) if f_ph[k] > 0}
            big = [abs(v["diff"]) for v in ph.values() if v["full_s"] > 0.05]
            rows.append({"experiment": exp.name, "mode": mode.value, "plan": plan.describe(),
                         "full_step_s": round(f_step, 4), "quick_step_s": round(q_step, 4),
                         "step_diff": round(q_step / f_step - 1, 4), "phases": ph,
                         "phase_max_abs_diff": round(max(big), 4) if big else None})
    return rows


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default=CONFIGS, help="experiment configs under configs/")
    ap.add_argument("--full", default=None,
                    help="an existing full profile made on THIS host (skips making one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    from yatt.core.config import load_experiment
    from yatt.planner.coverage import missing_terms
    from yatt.planner.profile_io import load_profile
    from yatt.planner.profiled import shipped_profile
    from yatt.profiling.points import Points

    names = [c for c in args.configs.split(",") if c]
    exps = [load_experiment(ROOT / "configs" / f"{c}.yaml") for c in names]
    load0 = os.getloadavg()[0]
    base = shipped_profile(exps[0].cluster.gpu.name)   # what `yatt profile --quick` takes
    quick, quick_s = make(exps, Points.quick(), PROFILES / "quick-1.yaml", base)
    if args.full:
        full, full_s = load_profile(args.full), None
    else:
        full, full_s = make(exps, Points(), PROFILES / "full.yaml")
    quick2, quick2_s = make(exps, Points.quick(), PROFILES / "quick-2.yaml", base)
    rows = compare(exps, with_contention_of(full, quick), on_full_probe(full, quick), args.seed)
    rows2 = compare(exps, with_contention_of(full, quick2), on_full_probe(full, quick2), args.seed)
    raw = compare(exps, full, quick, args.seed) + compare(exps, full, quick2, args.seed)

    def abs_diffs(rs):
        return ([abs(v["diff"]) for r in rs for v in r["phases"].values() if v["full_s"] > 0.05],
                [abs(r["step_diff"]) for r in rs])

    diffs, steps = abs_diffs(rows + rows2)
    diffs_raw, steps_raw = abs_diffs(raw)
    probes = {k: (p.tables.host_probe_python_s, p.tables.host_probe_matmul_s)
              for k, p in (("quick", quick), ("full", full), ("quick_2", quick2))}
    per_exp = [quick_s / len(exps), quick2_s / len(exps)]
    # a user re-profiling for one config: the first one alone
    _, alone_s = make(exps[:1], Points.quick(), PROFILES / "quick-alone.yaml", base)
    res = {"configs": names, "full_profile": args.full or str(PROFILES / "full.yaml"),
           "full_wall_s": None if full_s is None else round(full_s, 1),
           "quick_wall_s": [round(quick_s, 1), round(quick2_s, 1)],
           "quick_wall_s_per_config": [round(x, 1) for x in per_exp],
           "quick_alone": {"config": names[0], "wall_s": round(alone_s, 1)},
           "quick_base": None if base is None else _rel(base[1]),
           "quick_source": quick.source,
           "quick_missing_terms": {e.name: list(missing_terms(quick, e)) for e in exps},
           "load_avg": round((load0 + os.getloadavg()[0]) / 2, 2),
           "cases": rows, "cases_second_quick": rows2, "cases_raw": raw,
           "phase_median_abs_diff": round(statistics.median(diffs), 4) if diffs else None,
           "phase_max_abs_diff": round(max(diffs), 4) if diffs else None,
           "step_median_abs_diff": round(statistics.median(steps), 4) if steps else None,
           "step_max_abs_diff": round(max(steps), 4) if steps else None,
           "phase_median_abs_diff_raw": round(statistics.median(diffs_raw), 4) if diffs_raw else None,
           "phase_max_abs_diff_raw": round(max(diffs_raw), 4) if diffs_raw else None,
           "step_max_abs_diff_raw": round(max(steps_raw), 4) if steps_raw else None,
           "host_probe_s": {k: [round(a, 6), round(b, 6)] for k, (a, b) in probes.items()},
           "targets": {"phase_max_abs_diff": PHASE_TARGET, "quick_wall_s": WALL_TARGET_S},
           "phase_target_met": bool(diffs) and max(diffs) <= PHASE_TARGET,
           "wall_target_met": max(quick_s, quick2_s, alone_s) <= WALL_TARGET_S}
    out = Path(args.out)
    write_result(out, res, indent=2)
    print(f"quick profile: {res['quick_wall_s']} s for {len(exps)} configs (full "
          f"{res['full_wall_s']} s); per phase vs full median {res['phase_median_abs_diff']}, "
          f"max {res['phase_max_abs_diff']} (as measured: {res['phase_max_abs_diff_raw']}); "
          f"step time max {res['step_max_abs_diff']} -> {out}")
    return res


if __name__ == "__main__":
    main()
