"""Planner speed and regret, from 32 to 16,384 GPUs, over the space with trainer PP.

Why: `yatt plan` must answer in seconds however large the cluster, and its search must not
give up quality for that speed. Scenario: H100 nodes of 8, Qwen2.5-7B actor, Qwen2.5-72B
GenRM, long-tailed responses with dynamic sampling, 8 samples per GPU (8,192 samples per
step at 1,024 GPUs); the frontier cases are 8,192 GPUs with 8,192 prompts x 8 samples and
16,384 GPUs with 4,096 prompts x 64. The space holds every mode, split, engine TP and
trainer TP x PP layout (`SearchSpec.pp_choices` 1, 2, 4, 8; the 7B's 28 layers allow PP
1, 2, 4).

Speed: one search at 1,024 GPUs, wall and CPU seconds (target 5 s wall). Regret =
(chosen step time - exhaustive optimum) / optimum, on the seed-0 simulation, with the
same samples-per-GPU load, at 32, 64, ... GPUs while the exhaustive search's candidates
(one simulation each) stay within --exhaustive-max: the largest such size is the largest
where exhaustive search is feasible. The space sizes are recorded with and without PP.

Scale (`scale` in the result): `yatt plan` end to end in a fresh process per frontier
case - wall seconds including plan.yaml, timeline.json, timeline.png and ranking.csv,
CPU seconds and peak RSS of that process and its workers (targets: 8,192 GPUs in 5 s and
1 GB, 16,384 GPUs in 15 s) - and, in process, the CPU split between search and outputs
with operation counts (slice simulations, fluid evaluations, spans, samples). Regret at
1,024 and 8,192 GPUs is measured against a reference: SimPy simulations of the split at
full size for the finalists' TP pairs and trainer layouts (every --scan-step devices over
all splits, then every legal split within --scan-fine devices of the best point and of the
chosen one) and of the full-colocate finalist; regret = (the chosen plan's seed-0
simulation - the reference's best) / the reference's best.

Writes bench/results/plan_speed.json and prints one summary line. A benchmark: run it on
a quiet machine. `--quick` (256 GPUs, regret at 32, the scale runs at 1,024 GPUs with a
coarse scan) only checks that it works.
"""
from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import write_result  # bench/ holds the script: on sys.path

from yatt.core import ClusterSpec, DistKind, Experiment, LengthDist, SearchSpec, Workload, catalog
from yatt.core.config import dump_yaml
from yatt.planner.costmodel import AnalyticCostModel
from yatt.planner.idle import side_waits
from yatt.planner.fullsize import full_space_size
from yatt.planner.search import search
from yatt.planner.space import placement_space


# frontier cases: GPUs -> (prompts, samples per prompt)
SCALE = {8192: (8192, 8), 16384: (4096, 64)}


def scenario(gpus: int, prompts: int | None = None, samples: int = 8) -> Experiment:
    cluster = ClusterSpec(catalog.gpu("H100-SXM"), nodes=gpus // 8, gpus_per_node=8)
    prompts = gpus if prompts is None else prompts  # default: x 8 samples = 8 per GPU
    w = Workload(prompts_per_step=prompts, samples_per_prompt=samples,
                 prompt_len=LengthDist(DistKind.LOGNORMAL, 400, sigma=0.4, min=32, max=2048),
                 response_len=LengthDist(DistKind.LOGNORMAL, 1500, sigma=0.8, min=16, max=16384),
                 genrm_template_tokens=256,
                 genrm_output_len=LengthDist(DistKind.LOGNORMAL, 256, sigma=0.5, min=8, max=1024),
                 dynamic_sampling=True, all_equal_prob=0.2, max_resample_rounds=2)
    return Experiment(f"plan-speed-{gpus}", cluster, catalog.model("Qwen2.5-7B"), w,
                      genrm=catalog.model("Qwen2.5-72B"), search=SearchSpec(seeds=3))


def space_sizes(gpus: int) -> dict:
    """Candidates (one exhaustive simulation each) with and without trainer PP."""
    exp = scenario(gpus)
    flat = dataclasses.replace(exp, search=dataclasses.replace(exp.search, pp_choices=(1,)))
    space = placement_space(exp)
    return {"candidates": full_space_size(exp, space),
            "candidates_without_pp": full_space_size(flat, placement_space(flat)),
            "trainer_layouts": [f"tp{tp}" + (f"·pp{pp}" if pp > 1 else "")
                                for tp, pp in space.trainer_layouts]}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def speed(gpus: int) -> dict:
    exp = scenario(gpus)
    cost = AnalyticCostModel.for_experiment(exp)
    t0, c0, k0 = time.perf_counter(), time.process_time(), _children_cpu()
    res = search(exp, cost)
    wall, cpu, kids = time.perf_counter() - t0, time.process_time() - c0, _children_cpu() - k0
    return {"gpus": gpus, "samples": exp.workload.samples_per_step, "seconds": round(wall, 3),
            "cpu_seconds": round(cpu, 3), "worker_cpu_seconds": round(kids, 3),
            "simulations": res.simulations, "candidates": res.space_size,
            "best": res.best.plan.describe(), "best_step_s": round(res.best.mean, 2),
            "how": res.note, "target_seconds": 5.0}


def regret(gpus: int) -> dict:
    e = scenario(gpus)
    c = AnalyticCostModel.for_experiment(e)
    t0 = time.perf_counter()
    fast = search(e, c, seeds=1)
    t1 = time.perf_counter()
    full = search(e, c, seeds=1, exhaustive=True)
    opt = full.best.step_times[0]
    return {"regret": round((fast.best.step_times[0] - opt) / opt, 5),
            "chosen": fast.best.plan.describe(), "optimum": full.best.plan.describe(),
            "simulations": fast.simulations, "exhaustive_simulations": full.simulations,
            "seconds": round(t1 - t0, 2), "exhaustive_seconds": round(time.perf_counter() - t1, 2)}


def plan_run(exp: Experiment, out: Path) -> dict:
    """`yatt plan` on `exp` in a fresh process, every output written: wall seconds, CPU
    seconds and peak RSS of that process and its workers (their rusage, via wait4)."""
    out.mkdir(parents=True, exist_ok=True)
    cfg = out / "config.yaml"
    dump_yaml(exp, cfg)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "yatt.cli.main", "plan", str(cfg), "--out",
                             str(out / "plan"), "--no-progress"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, text=True)
    text = proc.stdout.read() if proc.stdout else ""
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise RuntimeError(f"yatt plan failed ({status}):\n{text[-2000:]}")
    files = {p.name: p.stat().st_size for p in sorted((out / "plan").iterdir())}
    return {"wall_seconds": round(wall, 3), "cpu_seconds": round(ru.ru_utime + ru.ru_stime, 3),
            "peak_rss_mb": round(ru.ru_maxrss / 1024, 1), "output_bytes": files}


def breakdown(exp: Experiment, out: Path) -> tuple[dict, object]:
    """The same plan in process: CPU of the search and of the outputs, operation counts."""
    from yatt.cli.plan import write_outputs
    from yatt.planner.advice import plan_experiment

    cost = AnalyticCostModel.for_experiment(exp)
    c0 = time.process_time()
    result = plan_experiment(exp, cost)   # the search `yatt plan` runs
    c1 = time.process_time()
    write_outputs(out, result)
    c2 = time.process_time()
    res = result.search
    best = res.best
    return {"search_cpu_seconds": round(c1 - c0, 3), "outputs_cpu_seconds": round(c2 - c1, 3),
            "slice_simulations": res.simulations,
            "fluid_evaluations": sum(r.evaluated for r in res.refinements),
            "full_size_simulations": sum(1 for c in res.ranked
                                         if c.trace.meta.extra.get("model") != "fluid"),
            "best": best.plan.describe(), "best_step_s": round(best.mean, 2),
            "best_priced_by": best.trace.meta.extra.get("model", "simulation"),
            "trace_spans": len(best.trace.spans), "trace_samples": len(best.trace.samples),
            "rollout_wait_share": round((side_waits(best.trace) or (0.0, 0.0))[0], 4),
            "how": res.note, "idle_note": res.idle_note}, res


def _sim_step(job: tuple) -> float:
    plan, workload, cost = job
    from yatt.sim.simulate import simulate
    return simulate(plan, workload, cost, seed=0).meta.extra["steps"][0]["step_time_s"]


def _simulate_all(jobs: list, workers: int) -> list[float]:
    if workers > 1 and len(jobs) > 1:
        with mp.get_context("fork").Pool(min(workers, len(jobs))) as pool:
            return pool.map(_sim_step, jobs, chunksize=1)
    return [_sim_step(j) for j in jobs]


def scale_regret(exp: Experiment, res, step: int, fine: int, workers: int) -> dict:
    """Regret of `res`'s choice against SimPy scans of the finalists' splits at full size."""
    from yatt.core import Mode
    from yatt.planner.simjobs import Evaluator
    from yatt.planner.space import partial_splits

    cost = AnalyticCostModel.for_experiment(exp)
    ev = Evaluator(exp, cost)
    w = exp.workload
    chosen = res.best.key
    t0 = time.perf_counter()
    sims: dict = {}

    def run(keys: list) -> None:
        todo = [k for k in dict.fromkeys(keys) if k not in sims]
        for k, t in zip(todo, _simulate_all([(ev.plan(k), w, cost) for k in todo], workers)):
            sims[k] = t
    run([chosen] + [c.key for c in res.ranked if c.key[0] is Mode.COLOCATE])
    for cfg in dict.fromkeys((c.key[0], 0, *c.key[2:]) for c in res.ranked if c.key[0] is Mode.PARTIAL):
        splits = partial_splits(exp, cfg[2], cfg[3])
        coarse = [r for r in splits if r % step == 0] or splits[::max(1, len(splits) // 16)]
        run([(cfg[0], r, *cfg[2:]) for r in coarse])
        mine = {k[1]: t for k, t in sims.items() if k[0] is Mode.PARTIAL and k[2:] == cfg[2:]}
        around = {min(mine, key=mine.get)} | ({chosen[1]} if chosen[2:] == cfg[2:] else set())
        run([(cfg[0], r, *cfg[2:]) for r in splits if any(abs(r - a) <= fine for a in around)])
    ref_key = min(sims, key=lambda k: (sims[k], k))
    got = sims[chosen]
    fluid = res.best.step_times[0] if res.best.trace.meta.extra.get("model") == "fluid" else None
    start = next((r.start for r in res.refinements if (r.rollout_tp, r.genrm_tp) == chosen[2:4]), None)
    out = {"regret": round((got - sims[ref_key]) / sims[ref_key], 5),
           "chosen": res.best.plan.describe(), "chosen_simulated_s": round(got, 3),
           "reference": ev.plan(ref_key).describe(), "reference_s": round(sims[ref_key], 3),
           "reference_simulations": len(sims), "scan_step": step, "scan_fine": fine,
           "seconds": round(time.perf_counter() - t0, 1)}
    if fluid is not None:
        out["fluid_error"] = round((fluid - got) / got, 5)
    if start is not None and start != chosen[1]:  # what the slice alone would have chosen
        k = (chosen[0], start, *chosen[2:])
        run([k])
        out["slice_choice"] = ev.plan(k).describe()
        out["slice_choice_regret"] = round((sims[k] - sims[ref_key]) / sims[ref_key], 5)
    return out


def scale(cases: dict[int, tuple[int, int]], regret_gpus: set[int], step: int, fine: int,
          workers: int, tmp: Path) -> dict:
    out = {}
    for gpus, (prompts, k) in cases.items():
        exp = scenario(gpus, prompts, k)
        row = {"gpus": gpus, "samples": exp.workload.samples_per_step,
               "target_seconds": 5.0 if gpus <= 8192 else 15.0,
               "target_rss_mb": 1024 if gpus <= 8192 else None}
        row.update(plan_run(exp, tmp / f"run-{gpus}"))
        info, res = breakdown(exp, tmp / f"in-process-{gpus}")
        row.update(info)
        if gpus in regret_gpus:
            row["regret"] = scale_regret(exp, res, step, fine, workers)
        out[str(gpus)] = row
        print(f"  {gpus} GPUs: {row['wall_seconds']:.2f} s wall, {row['peak_rss_mb']:.0f} MB"
              + (f", regret {row['regret']['regret']:.4f}" if "regret" in row else ""), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1024, help="cluster size of the speed run")
    ap.add_argument("--regret-gpus", default="auto",
                    help="comma-separated sizes, or auto: 32, 64, ... within --exhaustive-max")
    ap.add_argument("--exhaustive-max", type=int, default=3000,
                    help="most candidates an exhaustive search may simulate (auto sizes)")
    ap.add_argument("--quick", action="store_true",
                    help="a check that the bench works: speed at 256 GPUs, regret at 32")
    ap.add_argument("--scan-step", type=int, default=0,
                    help="devices between the reference scan's splits (0: every split up to "
                         "2,048 GPUs, else 1/32 of the cluster)")
    ap.add_argument("--scan-fine", type=int, default=0,
                    help="devices around the best and the chosen split scanned at every legal "
                         "split (0: 1/64 of the cluster)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="processes for the reference scans")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "plan_speed.json"))
    args = ap.parse_args()
    gpus, sizes = args.gpus, args.regret_gpus
    cases, scale_regret_gpus = dict(SCALE), {1024, 8192}
    if args.quick:
        gpus, sizes = 256, "32"
        cases, scale_regret_gpus = {1024: (1024, 8)}, {1024}
    if sizes == "auto":
        regret_gpus, g = [], 32
        while g <= gpus and space_sizes(g)["candidates"] <= args.exhaustive_max:
            regret_gpus.append(g)
            g *= 2
    else:
        regret_gpus = [int(x) for x in sizes.split(",") if x]
    out = speed(gpus)
    out["space_sizes"] = {str(g): space_sizes(g) for g in sorted({32, 64, 128, 256, 512, 1024, gpus})}
    out["regret"] = {str(g): regret(g) for g in regret_gpus}
    rs = [r["regret"] for r in out["regret"].values()]
    out["regret_max"] = max(rs) if rs else None
    out["regret_largest_gpus"] = max(regret_gpus) if regret_gpus else None
    out["exhaustive_max"] = args.exhaustive_max
    out["target_regret"] = 0.01
    with tempfile.TemporaryDirectory() as tmp:
        if 1024 in scale_regret_gpus and 1024 not in cases:
            cases = {1024: (1024, 8), **cases}
        out["scale"] = {}
        for g, case in cases.items():
            st = args.scan_step or (8 if g <= 2048 else g // 32)   # every split up to 2,048
            fi = args.scan_fine or max(8, g // 64)
            out["scale"].update(scale({g: case}, scale_regret_gpus, st, fi, args.workers, Path(tmp)))
    write_result(args.out, out, indent=2)
    print(f"plan_speed: {gpus} GPUs in {out['seconds']:.2f} s wall / {out['cpu_seconds']:.2f} s CPU "
          f"(+{out['worker_cpu_seconds']:.2f} s in workers; {out['simulations']} sims over "
          f"{out['candidates']} candidates, {out['space_sizes'][str(gpus)]['candidates_without_pp']} "
          f"without PP; target 5 s); regret max {out['regret_max']} up to "
          f"{out['regret_largest_gpus']} GPUs (target 0.01)")
    for g, row in out["scale"].items():
        r = row.get("regret", {}).get("regret")
        print(f"  {g} GPUs, {row['samples']:,} samples: {row['wall_seconds']:.2f} s wall with outputs "
              f"(target {row['target_seconds']:g} s), {row['peak_rss_mb']:.0f} MB peak"
              + (f", regret {r:.4f} vs {row['regret']['reference_simulations']} simulations"
                 if r is not None else ""))


if __name__ == "__main__":
    main()
