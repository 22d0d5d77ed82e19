"""Small, fast synthetic traces for replay/calibrate tests (simulated with known costs)."""
from __future__ import annotations

from yatt.core import ClusterSpec, EngineSpec, Experiment, LengthDist, Mode, Trace, Workload, catalog
from yatt.core.roles import DistKind
from yatt.planner.costmodel import AnalyticCostModel, Efficiency
from yatt.sim import make_plan, simulate

TRUTH = Efficiency(train_mfu=0.3, prefill_mfu=0.45, decode_bw_eff=0.6, decode_step_overhead_s=0.004,
                   host_link_eff=0.6, switch_overhead_s=1.2, comm_eff=0.55, sync_overhead_s=0.5)


def experiment(prompts: int = 32, growth: float = 0.3) -> Experiment:
    return Experiment(
        name="t", cluster=ClusterSpec(catalog.gpu("H100-SXM"), nodes=2, gpus_per_node=8),
        actor=catalog.model("Qwen2.5-1.5B"), genrm=catalog.model("Qwen2.5-7B"),
        workload=Workload(prompts_per_step=prompts, samples_per_prompt=4,
                          prompt_len=LengthDist(DistKind.LOGNORMAL, 200, sigma=0.4, min=32, max=2048),
                          response_len=LengthDist(DistKind.LOGNORMAL, 800, sigma=0.8, min=16, max=8000),
                          genrm_output_len=LengthDist(DistKind.CONST, 64),
                          response_growth_per_step=growth),
        engine=EngineSpec(max_num_seqs=64, genrm_max_num_seqs=64))


def synthetic_trace(eff: Efficiency = TRUTH, steps: int = 4, mode: Mode = Mode.COLOCATE,
                    seed: int = 0) -> Trace:
    exp = experiment()
    plan = make_plan(exp, mode, genrm_tp=2, trainer_tp=1)
    return simulate(plan, exp.workload, AnalyticCostModel.for_experiment(exp, eff), seed, steps=steps)
