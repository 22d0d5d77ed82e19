"""Pinned numbers: with pp=1, mini_batches=1 and old_logprobs=reuse, the simulator, the
analytic and profiled cost models and the memory model give exactly the numbers they gave
before pipeline parallelism, mini-batches and the old-log-prob pass were modelled.

Why: those features extend the trainer's model; a plan that uses none of them must be
priced exactly as before (bit for bit), so every earlier prediction, calibration and
regret figure stays valid. The partial rows pin the engine's streaming model too (joins at
step boundaries, a streamed GenRM's merged calls).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from yatt.core import AlgoSpec, ClusterSpec, Mode, Parallel, ReleasePolicy, Role, catalog
from yatt.core.config import load_experiment
from yatt.planner import memory
from yatt.planner.costmodel import AnalyticCostModel
from yatt.planner.profile_io import load_profile
from yatt.planner.profiled import cost_model_for, experiment_for
from yatt.sim import make_plan, simulate

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "sim"))
from fakecost import FakeCostModel  # noqa: E402
from helpers import experiment, workload  # noqa: E402


def _steps(plan, w, cost, seed=0, steps=1) -> tuple[float, ...]:
    tr = simulate(plan, w, cost, seed, steps=steps)
    return tuple(float(e["step_time_s"]) for e in tr.meta.extra["steps"])


def test_fake_cost_step_times_unchanged():
    w = workload(24, 4, ds=True, p_equal=0.3, rounds=2)
    exp = experiment(w, algo=AlgoSpec(ppo_epochs=2))
    f = FakeCostModel()
    assert _steps(make_plan(exp, Mode.COLOCATE, trainer_tp=2), w, f, 5, 2) == (
        12.538059923851337, 12.269411306177089)
    assert _steps(make_plan(exp, Mode.PARTIAL, rollout_devices=4), w, f, 5, 2) == (
        7.385762914258887, 7.0420078553895085)


def test_analytic_step_times_unchanged():
    exp = load_experiment(ROOT / "configs" / "default.yaml")
    exp = dataclasses.replace(exp, workload=dataclasses.replace(exp.workload, prompts_per_step=64))
    c = AnalyticCostModel.for_experiment(exp)
    plan = make_plan(exp, Mode.COLOCATE, rollout_tp=1, genrm_tp=4, trainer_tp=1)
    assert _steps(plan, exp.workload, c, 1) == (223.37337282616306,)
    plan = make_plan(exp, Mode.PARTIAL, rollout_devices=16, rollout_tp=1, genrm_tp=4, trainer_tp=2)
    assert _steps(plan, exp.workload, c, 1) == (143.99181248303685,)


# the CPU profile these numbers were recorded with (the shipped one is re-made as the
# executor changes)
PINNED_PROFILE = ROOT / "tests" / "data" / "profiles" / "cpu-local-pinned.yaml"


def test_profiled_step_times_unchanged():
    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    prof = load_profile(PINNED_PROFILE)
    exp = experiment_for(exp, prof)
    c = cost_model_for(exp, prof)
    assert _steps(make_plan(exp, Mode.COLOCATE), exp.workload, c, 0, 2) == (
        10.610248570891773, 10.603622674166697)
    assert _steps(make_plan(exp, Mode.PARTIAL, rollout_devices=1), exp.workload, c, 0, 2) == (
        5.903823157210395, 5.8705830332536735)


# (train, grad sync, log-prob, offload, reload, checkpoint, memory (default algo),
#  memory (no recompute, no distributed optimizer)) of Qwen2.5-7B on 2 x 8 H100
TERMS = {
    1: (2.406166705704779, 0.7677341677847348, 0.6032083430928613, 1.532859382278481,
        1.532859382278481, 26.654657792, 67655900800.0, 203948447232.0),
    2: (1.252782967762019, 0.36156795381140144, 0.3181707098496405, 1.0738107679324895,
        1.0738107679324895, 26.654657792, 37183806592.0, 102474223616.0),
    4: (0.6744110987906392, 0.15848484682473477, 0.17509189322803018, 0.8442864607594937,
        0.8442864607594937, 26.654657792, 21947759488.0, 51737111808.0),
    8: (0.38522516430494924, 0.05694329333140147, 0.10355248491722496, 0.7295243071729958,
        0.7295243071729958, 26.654657792, 14329735936.0, 26368555904.0),
}


@pytest.mark.parametrize("tp", sorted(TERMS))
def test_analytic_terms_and_memory_unchanged(tp):
    m = catalog.model("Qwen2.5-7B")
    cl = ClusterSpec(catalog.gpu("H100-SXM"), nodes=2, gpus_per_node=8)
    a = AnalyticCostModel(cl, recompute=True, micro_batch_tokens=8192)
    lens = [300, 1200, 4000, 777, 9000]
    par = Parallel(tp, 1, 16 // tp)
    got = (a.train_time(m, lens, par), a.grad_sync_time(m, par), a.logprob_time(m, lens, par),
           a.offload_time(m, Role.TRAINER, par, ReleasePolicy.OFFLOAD),
           a.reload_time(m, Role.TRAINER, par, ReleasePolicy.OFFLOAD), a.checkpoint_time(m, par),
           memory.trainer_memory(m, par, AlgoSpec(), cl.gpu).total,
           memory.trainer_memory(m, par, AlgoSpec(recompute=False, distributed_optimizer=False),
                                 cl.gpu).total)
    assert got == TERMS[tp]
