"""Planner speed and regret, over the placement space with trainer pipeline parallelism.

Why: `yatt plan` must answer in seconds even for a 1,024-GPU cluster, and its guarded
search must not give up quality for that speed. Scenario: H100 nodes of 8, Qwen2.5-7B
actor, Qwen2.5-72B GenRM, long-tailed responses, 8 samples per GPU at 1,024 GPUs
(8,192 samples per step). The space holds every mode, split, engine TP and trainer
TP x PP layout (`SearchSpec.pp_choices` 1, 2, 4, 8; the 7B's 28 layers allow PP 1, 2, 4).

Speed: one search at 1,024 GPUs, wall and CPU seconds (target 5 s wall). Regret =
(chosen step time - exhaustive optimum) / optimum, on the seed-0 simulation, with the
same samples-per-GPU load, at 32, 64, ... GPUs while the exhaustive search's candidates
(one simulation each) stay within --exhaustive-max: the largest such size is the largest
where exhaustive search is feasible. The space sizes are recorded with and without PP.

Writes bench/results/plan_speed.json and prints one summary line. A benchmark: run it on
a quiet machine. `--quick` (256 GPUs, regret at 32) only checks that it works.
"""
from __future__ import annotations

import argparse
import dataclasses
import resource
import time
from pathlib import Path

from _results import write_result  # bench/ holds the script: on sys.path

from yatt.core import ClusterSpec, DistKind, Experiment, LengthDist, SearchSpec, Workload, catalog
from yatt.planner.costmodel import AnalyticCostModel
from yatt.planner.search import _full_space_size, search
from yatt.planner.space import placement_space


def scenario(gpus: int) -> Experiment:
    cluster = ClusterSpec(catalog.gpu("H100-SXM"), nodes=gpus // 8, gpus_per_node=8)
    prompts = gpus  # x 8 samples = 8 samples per GPU
    w = Workload(prompts_per_step=prompts, samples_per_prompt=8,
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
    return {"candidates": _full_space_size(exp, space),
            "candidates_without_pp": _full_space_size(flat, placement_space(flat)),
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1024, help="cluster size of the speed run")
    ap.add_argument("--regret-gpus", default="auto",
                    help="comma-separated sizes, or auto: 32, 64, ... within --exhaustive-max")
    ap.add_argument("--exhaustive-max", type=int, default=3000,
                    help="most candidates an exhaustive search may simulate (auto sizes)")
    ap.add_argument("--quick", action="store_true",
                    help="a check that the bench works: speed at 256 GPUs, regret at 32")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "plan_speed.json"))
    args = ap.parse_args()
    gpus, sizes = args.gpus, args.regret_gpus
    if args.quick:
        gpus, sizes = 256, "32"
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
    write_result(args.out, out, indent=2)
    print(f"plan_speed: {gpus} GPUs in {out['seconds']:.2f} s wall / {out['cpu_seconds']:.2f} s CPU "
          f"(+{out['worker_cpu_seconds']:.2f} s in workers; {out['simulations']} sims over "
          f"{out['candidates']} candidates, {out['space_sizes'][str(gpus)]['candidates_without_pp']} "
          f"without PP; target 5 s); regret max {out['regret_max']} up to "
          f"{out['regret_largest_gpus']} GPUs (target 0.01)")


if __name__ == "__main__":
    main()
