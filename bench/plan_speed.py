"""Planner speed and regret.

Why: `yatt plan` must answer in seconds even for a 1,024-GPU cluster, and its guarded
search must not give up quality for that speed. Scenario: H100 nodes of 8, Qwen2.5-7B
actor, Qwen2.5-72B GenRM, long-tailed responses, 8 samples per GPU at 1,024 GPUs
(8,192 samples per step). Regret = (chosen step time - exhaustive optimum) / optimum, on
the seed-0 simulation, at 32, 64 and 128 GPUs with the same samples-per-GPU load.

Writes bench/results/plan_speed.json and prints one summary line.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from _results import write_result  # bench/ holds the script: on sys.path

from yatt.core import ClusterSpec, DistKind, Experiment, LengthDist, SearchSpec, Workload, catalog
from yatt.planner.costmodel import AnalyticCostModel
from yatt.planner.search import search


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regret-gpus", default="32,64,128")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "plan_speed.json"))
    args = ap.parse_args()
    exp = scenario(1024)
    cost = AnalyticCostModel.for_experiment(exp)
    t0, c0 = time.perf_counter(), time.process_time()
    res = search(exp, cost)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {"gpus": 1024, "samples": exp.workload.samples_per_step, "seconds": round(wall, 3),
           "cpu_seconds": round(cpu, 3), "simulations": res.simulations,
           "candidates": res.space_size, "best": res.best.plan.describe(),
           "best_step_s": round(res.best.mean, 2), "target_seconds": 5.0, "regret": {}}
    regrets = []
    for g in [int(x) for x in args.regret_gpus.split(",") if x]:
        e = scenario(g)
        c = AnalyticCostModel.for_experiment(e)
        fast = search(e, c, seeds=1)
        full = search(e, c, seeds=1, exhaustive=True)
        opt = full.best.step_times[0]
        r = (fast.best.step_times[0] - opt) / opt
        regrets.append(r)
        out["regret"][str(g)] = {"regret": round(r, 5), "chosen": fast.best.plan.describe(),
                                 "optimum": full.best.plan.describe(),
                                 "simulations": fast.simulations, "exhaustive_simulations": full.simulations}
    out["regret_max"] = round(max(regrets), 5) if regrets else None
    out["target_regret"] = 0.01
    write_result(args.out, out, indent=2)
    print(f"plan_speed: 1024 GPUs in {wall:.2f} s wall / {cpu:.2f} s CPU ({res.simulations} sims over "
          f"{res.space_size} candidates, target 5 s); regret max {out['regret_max']} (target 0.01)")


if __name__ == "__main__":
    main()
