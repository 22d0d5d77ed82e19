"""Simulator speed: one step of 16,384 samples (2,048 prompts x 8) on 64 H100s, per mode.

Why: the planner ranks many candidate plans by simulating them, so one simulated step
must stay well under a second. Actor Qwen2.5-7B, GenRM Qwen2.5-72B, lognormal responses
capped at 16k, the analytic cost model. Writes bench/results/sim_speed.json and prints one
line. Timing is the best of `--repeat` runs, wall and CPU (the machine is shared).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from _results import write_result  # bench/ holds the script: on sys.path

from yatt.core import ClusterSpec, DistKind, Experiment, LengthDist, Mode, Workload, catalog
from yatt.sim import make_plan, simulate, summarize


def scenario() -> Experiment:
    cluster = ClusterSpec(catalog.gpu("H100-SXM"), nodes=8, gpus_per_node=8, name="h100-8x8")
    w = Workload(prompts_per_step=2048, samples_per_prompt=8,
                 prompt_len=LengthDist(DistKind.LOGNORMAL, 512, sigma=0.5, min=32, max=4096),
                 response_len=LengthDist(DistKind.LOGNORMAL, 2048, sigma=0.9, min=16, max=16384))
    return Experiment("sim-speed", cluster, catalog.model("Qwen2.5-7B"), w,
                      genrm=catalog.model("Qwen2.5-72B"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "sim_speed.json"))
    args = ap.parse_args()
    from yatt.planner.costmodel import AnalyticCostModel
    exp = scenario()
    cost = AnalyticCostModel.for_experiment(exp)
    plans = {"colocate": make_plan(exp, Mode.COLOCATE, rollout_tp=1, genrm_tp=8, trainer_tp=2),
             "partial": make_plan(exp, Mode.PARTIAL, rollout_devices=32, rollout_tp=1,
                                  genrm_tp=8, trainer_tp=2)}
    res: dict = {"samples": exp.workload.samples_per_step, "gpus": exp.cluster.num_gpus,
                 "cost_model": type(cost).__name__}
    for name, plan in plans.items():
        best = cpu = float("inf")
        for _ in range(args.repeat):
            t, c = time.perf_counter(), time.process_time()
            trace = simulate(plan, exp.workload, cost, seed=0)
            best = min(best, time.perf_counter() - t)
            cpu = min(cpu, time.process_time() - c)
        res[f"seconds_{name}"] = round(best, 4)
        res[f"cpu_seconds_{name}"] = round(cpu, 4)
        res[f"simulated_step_s_{name}"] = round(summarize(trace).step_time_mean, 2)
        res[f"plan_{name}"] = plan.describe()
    write_result(args.out, res, indent=2)
    print(f"sim_speed: {res['samples']} samples on {res['gpus']} GPUs: colocate "
          f"{res['seconds_colocate']:.3f}s (step {res['simulated_step_s_colocate']}s sim), partial "
          f"{res['seconds_partial']:.3f}s (step {res['simulated_step_s_partial']}s sim)")


if __name__ == "__main__":
    main()
