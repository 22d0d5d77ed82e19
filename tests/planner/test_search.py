"""Placement search: optimality against exhaustive search, the mode crossover, errors."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yatt.core import (ClusterSpec, EngineSpec, Experiment, InputError, LengthDist, Mode,
                       ReleasePolicy, SearchSpec, Workload, catalog)
from yatt.core.roles import DistKind
from yatt.planner.costmodel import AnalyticCostModel, Efficiency
from yatt.planner.search import search
from yatt.planner.space import partial_splits
from yatt.planner.splitsearch import local_split, search_split


def _exp(gpus=16, actor="Qwen2.5-1.5B", genrm="Qwen2.5-7B", gpu="H100-SXM", per_node=8,
         prompts=64, samples=4, resp=600, release=ReleasePolicy.OFFLOAD, tps=(1, 2, 4)):
    return Experiment(
        name="t", cluster=ClusterSpec(catalog.gpu(gpu), nodes=max(1, gpus // per_node),
                                      gpus_per_node=min(per_node, gpus)),
        actor=catalog.model(actor), genrm=catalog.model(genrm) if genrm else None,
        workload=Workload(prompts_per_step=prompts, samples_per_prompt=samples,
                          prompt_len=LengthDist(DistKind.CONST, 200),
                          response_len=LengthDist(DistKind.LOGNORMAL, resp, sigma=0.6, min=8, max=4096),
                          genrm_output_len=LengthDist(DistKind.CONST, 64)),
        engine=EngineSpec(max_num_seqs=64, genrm_max_num_seqs=64),
        search=SearchSpec(tp_choices=tps, release=release, seeds=2))


@pytest.mark.parametrize("gpus,genrm", [(8, "Qwen2.5-7B"), (16, "Qwen2.5-32B")])
def test_search_matches_exhaustive_optimum(gpus, genrm):
    exp = _exp(gpus=gpus, genrm=genrm)
    cost = AnalyticCostModel.for_experiment(exp)
    fast = search(exp, cost, seeds=1)
    full = search(exp, cost, seeds=1, exhaustive=True)
    assert full.simulations > fast.simulations
    # seed-0 step time of the chosen plan equals the exhaustive optimum (regret 0 here)
    assert fast.best.step_times[0] == pytest.approx(full.best.step_times[0], rel=1e-9)


def test_partial_wins_for_heavy_genrm_with_expensive_switching():
    # 32B judge, tiny actor, slow reloads (teardown + re-create), long judge inputs
    exp = _exp(gpus=16, actor="Qwen2.5-0.5B", genrm="Qwen2.5-32B", release=ReleasePolicy.TEARDOWN)
    cost = AnalyticCostModel.for_experiment(exp, Efficiency(engine_start_s=60.0))
    assert search(exp, cost, seeds=1).best.plan.mode is Mode.PARTIAL


def test_colocate_wins_for_tiny_genrm():
    exp = _exp(gpus=16, actor="Qwen2.5-7B", genrm="Qwen2.5-0.5B", resp=1500)
    cost = AnalyticCostModel.for_experiment(exp, Efficiency(switch_overhead_s=0.05))
    assert search(exp, cost, seeds=1).best.plan.mode is Mode.COLOCATE


def test_infeasible_is_explained():
    exp = _exp(gpus=2, per_node=2, genrm="Qwen2.5-Math-72B", gpu="A100-80G")
    with pytest.raises(InputError) as ei:
        search(exp, AnalyticCostModel.for_experiment(exp))
    msg = str(ei.value)
    assert "Qwen2.5-Math-72B GenRM needs TP >= 4 on A100-80G (weights 145 GB" in msg


def test_trainer_that_fits_nowhere_is_explained():
    exp = _exp(gpus=1, per_node=1, actor="Qwen2.5-72B", genrm="Qwen2.5-0.5B", tps=(1,))
    with pytest.raises(InputError, match="training state does not fit"):
        search(exp, AnalyticCostModel.for_experiment(exp))


@settings(max_examples=150, deadline=None)
@given(st.integers(3, 200), st.integers(0, 199), st.floats(0.1, 10), st.floats(0.1, 10))
def test_split_search_finds_min_of_unimodal(n, at, left, right):
    at = at % n
    f = {i: (at - i) * left if i < at else (i - at) * right for i in range(n)}
    best, unimodal, method, calls = search_split(lambda r: f[r], list(range(n)))
    assert best == at and unimodal
    assert calls <= max(n, 16)


def test_split_search_detects_non_unimodal_and_scans():
    n = 100
    vals = [abs(i - 10) + (0 if i != 80 else -50) + (30 if 40 <= i <= 60 else 0) for i in range(n)]
    best, unimodal, method, calls = search_split(lambda r: vals[r], list(range(n)))
    assert not unimodal and method == "scan"
    assert calls < n


def test_reference_tp_follows_engine_tp_choices():
    """An executor that runs inference engines at TP 1 only gets a TP-1 reference even when
    the trainer uses TP 2 (regression: `yatt run` refused such plans)."""
    from pathlib import Path

    from yatt.core.config import load_experiment
    from yatt.core.roles import Role
    from yatt.planner.simjobs import Evaluator
    exp = load_experiment(Path(__file__).resolve().parents[2] / "configs" / "demo-cpu.yaml")
    cost = AnalyticCostModel.for_experiment(exp)
    exp = dataclasses.replace(exp, search=dataclasses.replace(exp.search, engine_tp_choices=(1,)))
    ev = Evaluator(exp, cost)
    plan = ev.plan((Mode.COLOCATE, 0, 1, 1, 2, 1, 0, 0))
    assert plan.placement(Role.TRAINER).tp == 2 and plan.placement(Role.REFERENCE).tp == 1
    exp2 = dataclasses.replace(exp, search=dataclasses.replace(exp.search, engine_tp_choices=(1, 2)))
    assert Evaluator(exp2, cost).plan((Mode.COLOCATE, 0, 1, 1, 2, 1, 0, 0)).placement(Role.REFERENCE).tp == 2


def test_local_split_simulates_its_only_split():
    calls = []
    best, _, method, n = local_split(lambda r: calls.append(r) or 1.0, [4], 0.5)
    assert (best, method, n) == (4, "local", 1) and calls == [4]


@pytest.mark.parametrize("tps", [(1, 2, 4), (2, 4)])
def test_split_reports_count_what_they_simulated(tps):
    # 8 GPUs: the tp4/tp4 pair has one legal split, searched by the local hill-climb
    exp = _exp(gpus=8, genrm="Qwen2.5-7B", tps=tps)
    res = search(exp, AnalyticCostModel.for_experiment(exp), seeds=1)
    assert res.split_reports
    for r in res.split_reports:
        assert 1 <= r.evaluated <= r.splits, r
        assert r.best_rollout_devices in partial_splits(exp, r.rollout_tp, r.genrm_tp)
    assert sum(r.evaluated for r in res.split_reports) <= res.simulations
