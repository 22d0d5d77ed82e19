"""The fluid step model against the SimPy simulation: bounded errors, the same best split.

Why: the planner places full-size splits with the fluid model and simulates only what it
chooses (or nothing, past its budget), so a fluid model that ranks splits differently would
change the advice. On small clusters SimPy can simulate every split; there the fluid
model's choice must cost at most 1% over SimPy's best, and its step times near the optimum
must stay within a few percent.
"""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakecost import FakeCostModel
from helpers import experiment, workload
from yatt.core import (ClusterSpec, DistKind, Experiment, LengthDist, Mode, Role, SearchSpec, Workload,
                       catalog)
from yatt.planner.costmodel import AnalyticCostModel
from yatt.planner.space import partial_splits
from yatt.sim import make_plan, simulate, summarize
from yatt.sim.fluid import FluidModel, _FluidStep
from yatt.sim.fluid_engines import _batch_fit, _batch_loop, batch_times


def _bench_like(gpus: int, ds: bool, per_gpu: int) -> Experiment:
    """The plan_speed scenario's shape: long-tailed responses, a 72B judge."""
    w = Workload(prompts_per_step=gpus * per_gpu // 8, samples_per_prompt=8,
                 prompt_len=LengthDist(DistKind.LOGNORMAL, 400, sigma=0.4, min=32, max=2048),
                 response_len=LengthDist(DistKind.LOGNORMAL, 1500, sigma=0.8, min=16, max=16384),
                 genrm_template_tokens=256,
                 genrm_output_len=LengthDist(DistKind.LOGNORMAL, 256, sigma=0.5, min=8, max=1024),
                 dynamic_sampling=ds, all_equal_prob=0.2 if ds else 0.0, max_resample_rounds=2)
    return Experiment("fluid", ClusterSpec(catalog.gpu("H100-SXM"), nodes=gpus // 8, gpus_per_node=8),
                      catalog.model("Qwen2.5-7B"), w, genrm=catalog.model("Qwen2.5-72B"),
                      search=SearchSpec(seeds=1))


def _sim(plan, w, cost) -> float:
    return simulate(plan, w, cost, 0).meta.extra["steps"][0]["step_time_s"]


@pytest.mark.parametrize("gpus,ds,per_gpu,rtp,gtp", [
    (64, True, 8, 4, 8), (64, False, 8, 4, 8), (64, True, 16, 2, 8), (128, False, 4, 4, 8)])
def test_fluid_best_split_is_simpys_within_one_percent(gpus, ds, per_gpu, rtp, gtp):
    exp = _bench_like(gpus, ds, per_gpu)
    cost = AnalyticCostModel.for_experiment(exp)
    fm = FluidModel(cost)
    rows = []
    for r in partial_splits(exp, rtp, gtp):
        plan = make_plan(exp, Mode.PARTIAL, rollout_devices=r, rollout_tp=rtp, genrm_tp=gtp,
                         trainer_tp=4, reference_tp=4)
        rows.append((r, _sim(plan, exp.workload, cost), fm.step(plan, exp.workload, 0).step_time))
    best_sim = min(s for _, s, _ in rows)
    chosen = min(rows, key=lambda x: (x[2], x[0]))
    assert (chosen[1] - best_sim) / best_sim <= 0.01, rows
    near = [abs(f - s) / s for _, s, f in rows if s <= 1.2 * best_sim]
    assert max(near) <= 0.05, rows


@pytest.mark.parametrize("gpus,ds", [(64, True), (64, False)])
def test_fluid_colocate_is_the_batch_schedule(gpus, ds):
    """Colocate hands every round to idle engines in one batch: the fluid model computes
    those schedules per engine, so only its step-time table separates it from SimPy."""
    exp = _bench_like(gpus, ds, 8)
    cost = AnalyticCostModel.for_experiment(exp)
    plan = make_plan(exp, Mode.COLOCATE, rollout_tp=4, genrm_tp=8, trainer_tp=4, reference_tp=4)
    f = FluidModel(cost).step(plan, exp.workload, 0).step_time
    assert f == pytest.approx(_sim(plan, exp.workload, cost), rel=0.01)


@pytest.mark.parametrize("mode", [Mode.COLOCATE, Mode.PARTIAL])
def test_fluid_tracks_the_fake_cost_model(mode):
    w = workload(32, 4, ds=True, p_equal=0.3, rounds=2)
    exp = experiment(w, nodes=2)
    plan = make_plan(exp, mode, rollout_devices=8)
    cost = FakeCostModel()
    assert FluidModel(cost).step(plan, w, 5).step_time == pytest.approx(
        simulate(plan, w, cost, 5).meta.extra["steps"][0]["step_time_s"], rel=0.05)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 400), st.integers(1, 300)), min_size=1, max_size=40),
       st.floats(0.0, 3.0))
def test_vectorised_batch_equals_the_batching_loop(reqs, t0):
    """An engine whose whole batch fits is computed vectorised; one that does not runs the
    continuous-batching loop. Where both apply they agree (to rounding)."""
    n = len(reqs)
    w = dataclasses.replace(workload(n, 1), prompt_len=LengthDist(DistKind.CONST, 1))
    exp = experiment(w)
    plan = make_plan(exp, Mode.COLOCATE)
    fm = FluidModel(FakeCostModel())
    step = _FluidStep(fm, plan, fm.pool(w, 0))
    r = dataclasses.replace(step._role(Role.ROLLOUT, 1), inp=np.array([a for a, _ in reqs]),
                            out=np.array([b for _, b in reqs]),
                            rank=np.argsort(np.lexsort((np.arange(n), [b for _, b in reqs]))),
                            pf=np.linspace(0.01, 0.02, n), pj=np.linspace(0.01, 0.02, n), engines=1)
    items = np.arange(n)
    fit = _batch_fit(r, items, np.zeros(n, np.int64), np.array([n]), t0)
    loop = _batch_loop(r, items, t0)
    assert np.allclose(fit, loop, rtol=1e-9, atol=1e-9)


def test_fluid_trace_is_a_trace_of_the_same_step():
    exp = _bench_like(64, True, 8)
    cost = AnalyticCostModel.for_experiment(exp)
    plan = make_plan(exp, Mode.PARTIAL, rollout_devices=40, rollout_tp=4, genrm_tp=8, trainer_tp=4,
                     reference_tp=4)
    fm = FluidModel(cost)
    tr = fm.trace(plan, exp.workload, 0)
    st_ = fm.step(plan, exp.workload, 0)
    assert tr.meta.extra["model"] == "fluid"
    assert tr.step_times()[0] == pytest.approx(st_.step_time, rel=1e-9)
    assert all(0 <= d < 64 for s in tr.spans for d in s.devices)
    assert all(s.end_s >= s.start_s >= 0 for s in tr.spans)
    stats = summarize(tr)
    assert 0 <= stats.bubble_fraction < 1
    assert stats.samples_kept == int(fm.pool(exp.workload, 0).kept.sum())
    assert all(s.genrm_end_s >= s.rollout_end_s for s in tr.samples)


def test_engines_that_fit_are_priced_alike_next_to_engines_that_do_not():
    """A batch where some engines get more requests than max_num_seqs: those run the
    batching loop, the others the vectorised schedule; each engine's times are its own."""
    w = dataclasses.replace(workload(9, 1), prompt_len=LengthDist(DistKind.CONST, 8))
    exp = experiment(w)
    plan = make_plan(exp, Mode.COLOCATE)
    fm = FluidModel(FakeCostModel())
    step = _FluidStep(fm, plan, fm.pool(w, 0))
    r = dataclasses.replace(step._role(Role.ROLLOUT, 1), engines=4, max_seqs=2)
    items = np.arange(9)                        # dealt 3, 2, 2, 2: engine 0 loops
    both = batch_times(r, items, 0.0)
    for e in range(4):
        mine = items[items % 4 == e]
        alone = _batch_loop(r, mine, 0.0)
        assert np.allclose(both[mine], alone, rtol=1e-9), e
