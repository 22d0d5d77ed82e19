"""Regenerate the simulated traces shipped in traces/ (seeded, reproducible).

Why: `yatt replay` and `yatt calibrate` need traces to work from before measured runs
exist. These are simulator output (`source: simulated`) driven by length distributions
shaped like published GRPO/DAPO runs; traces/README.md gives each one's provenance.

    .venv/bin/python traces/make_simulated.py            # all traces
    .venv/bin/python traces/make_simulated.py small      # one, by name

Sample end times are rounded to milliseconds to keep files small; spans are exact.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from yatt.core import (AlgoSpec, ClusterSpec, EngineSpec, Experiment, LengthDist, Mode, Trace,
                       Workload, catalog)
from yatt.core.config import load_experiment
from yatt.core.roles import DistKind
from yatt.core.schema import to_dict
from yatt.planner.costmodel import AnalyticCostModel, Efficiency
from yatt.sim import make_plan, simulate

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SEED = 20250101

# Stand-in for "a real cluster is slower than the defaults": the coefficients the small
# trace is simulated with, so `yatt calibrate traces/small-...` has something to recover.
# (The fractions are 0.80 / 0.76 / 0.82 / 0.69 of the defaults.)
STAND_IN = Efficiency(train_mfu=0.40, prefill_mfu=0.53, decode_bw_eff=0.74,
                      decode_step_overhead_s=0.0035, host_link_eff=0.62, switch_overhead_s=1.5,
                      comm_eff=0.6, sync_overhead_s=0.8)


def dapo() -> tuple[str, Trace]:
    """DAPO-like: 512 prompts x 16 samples, long tail to 20k tokens growing 8%/step,
    dynamic sampling; Qwen2.5-7B actor, Qwen2.5-32B GenRM, 64 x H100 (8 nodes), colocate."""
    w = Workload(prompts_per_step=512, samples_per_prompt=16,
                 prompt_len=LengthDist(DistKind.LOGNORMAL, 250, sigma=0.4, min=32, max=2048),
                 response_len=LengthDist(DistKind.LOGNORMAL, 2500, sigma=0.9, min=64, max=20480),
                 genrm_template_tokens=256,
                 genrm_output_len=LengthDist(DistKind.LOGNORMAL, 200, sigma=0.5, min=8, max=1024),
                 dynamic_sampling=True, all_equal_prob=0.3, max_resample_rounds=1,
                 response_growth_per_step=0.08)
    exp = Experiment("dapo-7b-32b-h100x64", ClusterSpec(catalog.gpu("H100-SXM"), nodes=8, gpus_per_node=8),
                     catalog.model("Qwen2.5-7B"), w, genrm=catalog.model("Qwen2.5-32B"),
                     algo=AlgoSpec(micro_batch_tokens=32768),
                     engine=EngineSpec(max_num_seqs=256, genrm_max_num_seqs=128))
    plan = make_plan(exp, Mode.COLOCATE, rollout_tp=1, genrm_tp=4, trainer_tp=2)
    return exp.name, simulate(plan, w, AnalyticCostModel.for_experiment(exp), SEED, steps=3)


def wechat() -> tuple[str, Trace]:
    """configs/default.yaml (Qwen2.5-1.5B actor, Qwen2.5-Math-72B GenRM, 48 x A100-80G),
    1024 x 8 long-tailed, partial colocate with 16 rollout / 32 GenRM GPUs."""
    exp = load_experiment(ROOT / "configs/default.yaml")
    plan = make_plan(exp, Mode.PARTIAL, rollout_devices=16, rollout_tp=1, genrm_tp=8, trainer_tp=1)
    return "wechat-1.5b-72b-a100x48", simulate(plan, exp.workload, AnalyticCostModel.for_experiment(exp),
                                                SEED, steps=3)


def small() -> tuple[str, Trace]:
    """64 x 8 on 16 x H100, Qwen2.5-1.5B actor, Qwen2.5-7B GenRM, 4 steps, simulated with
    the STAND_IN efficiencies (not the defaults): the calibration demo."""
    w = Workload(prompts_per_step=64, samples_per_prompt=8,
                 prompt_len=LengthDist(DistKind.LOGNORMAL, 200, sigma=0.4, min=32, max=2048),
                 response_len=LengthDist(DistKind.LOGNORMAL, 900, sigma=0.8, min=16, max=8192),
                 genrm_output_len=LengthDist(DistKind.CONST, 64), response_growth_per_step=0.15)
    exp = Experiment("small-1.5b-7b-h100x16", ClusterSpec(catalog.gpu("H100-SXM"), nodes=2, gpus_per_node=8),
                     catalog.model("Qwen2.5-1.5B"), w, genrm=catalog.model("Qwen2.5-7B"),
                     engine=EngineSpec(max_num_seqs=128, genrm_max_num_seqs=128))
    plan = make_plan(exp, Mode.COLOCATE, rollout_tp=1, genrm_tp=2, trainer_tp=1)
    tr = simulate(plan, w, AnalyticCostModel.for_experiment(exp, STAND_IN), SEED, steps=4)
    extra = {**tr.meta.extra, "efficiency": to_dict(STAND_IN)}
    return exp.name, Trace(dataclasses.replace(tr.meta, extra=extra), tr.samples, tr.spans)


TRACES = {"dapo": dapo, "wechat": wechat, "small": small}


def _compact(tr: Trace) -> Trace:
    def r(x):
        return None if x is None else round(x, 3)
    samples = tuple(dataclasses.replace(s, rollout_end_s=r(s.rollout_end_s), genrm_end_s=r(s.genrm_end_s))
                    for s in tr.samples)
    return Trace(tr.meta, samples, tr.spans)


def main(names: list[str]) -> None:
    for key in names or list(TRACES):
        name, tr = TRACES[key]()
        path = HERE / f"{name}.jsonl.gz"
        _compact(tr).write_jsonl(path)
        steps = tr.meta.extra["steps"]
        print(f"{path.name}: {len(tr.samples)} samples, {len(tr.spans)} spans, "
              f"{path.stat().st_size / 1e6:.2f} MB, step times "
              + ", ".join(f"{s['step_time_s']:.1f}" for s in steps) + " s")


if __name__ == "__main__":
    main(sys.argv[1:])
