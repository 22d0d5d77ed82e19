"""A sliced search taken back to full size: the split refined at full resolution by the
fluid model, confirmed by simulation within the budget, priced by the fluid model past it.

Why: above 128 devices the search runs on a 1/k slice whose splits are k times coarser;
the full-size refinement is what makes the advice right at scale, and its fallbacks (fluid
seeds, fluid numbers) must say what they are.
"""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yatt.core import ClusterSpec, DistKind, Experiment, LengthDist, Mode, SearchSpec, Workload, catalog
from yatt.planner import fullsize
from yatt.planner.costmodel import AnalyticCostModel
from yatt.planner.refine import golden_min
from yatt.planner.search import search
from yatt.planner.space import partial_splits
from yatt.sim import make_plan, simulate


def _exp(gpus=256, prompts=64, seeds=2) -> Experiment:
    w = Workload(prompts_per_step=prompts, samples_per_prompt=8,
                 prompt_len=LengthDist(DistKind.LOGNORMAL, 400, sigma=0.4, min=32, max=2048),
                 response_len=LengthDist(DistKind.LOGNORMAL, 1500, sigma=0.8, min=16, max=16384),
                 genrm_template_tokens=256,
                 genrm_output_len=LengthDist(DistKind.LOGNORMAL, 256, sigma=0.5, min=8, max=1024),
                 dynamic_sampling=True, all_equal_prob=0.2, max_resample_rounds=2)
    return Experiment("scale", ClusterSpec(catalog.gpu("H100-SXM"), nodes=gpus // 8, gpus_per_node=8),
                      catalog.model("Qwen2.5-7B"), w, genrm=catalog.model("Qwen2.5-72B"),
                      search=SearchSpec(seeds=seeds, tp_choices=(4, 8), pp_choices=(1,)))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 300), st.integers(0, 299), st.integers(0, 299), st.integers(0, 60),
       st.floats(0.1, 10), st.floats(0.1, 10))
def test_golden_section_finds_the_minimum_from_any_bracket(n, at, lo, width, left, right):
    """Unimodal (V-shaped) objectives: found from any bracket, inside it or not."""
    at, lo = at % n, lo % n
    f = {i: (at - i) * left if i < at else (i - at) * right for i in range(n)}
    assert golden_min(lambda i: f[i], lo, min(n - 1, lo + width), n) == at


def test_sliced_search_refines_the_split_and_simulates_the_finalists():
    exp = _exp()
    cost = AnalyticCostModel.for_experiment(exp)
    res = search(exp, cost)
    assert res.refinements and "refined at full size with the fluid model" in res.note
    for r in res.refinements:
        assert r.best in partial_splits(exp, r.rollout_tp, r.genrm_tp) and 1 <= r.evaluated <= r.splits
    best = res.best
    assert best.trace.meta.extra.get("model") != "fluid"          # within budget: simulated
    assert best.step_times[0] == pytest.approx(
        simulate(best.plan, exp.workload, cost, 0).meta.extra["steps"][0]["step_time_s"], rel=1e-12)
    assert len(best.step_times) == 2


def test_refined_split_costs_at_most_one_percent_over_a_full_scan():
    exp = _exp(seeds=1)
    cost = AnalyticCostModel.for_experiment(exp)
    res = search(exp, cost)
    chosen = res.best.key
    if chosen[0] is not Mode.PARTIAL:
        pytest.skip("full colocate chosen: no split to refine")
    scan = [simulate(make_plan(exp, Mode.PARTIAL, rollout_devices=r, rollout_tp=chosen[2],
                               genrm_tp=chosen[3], trainer_tp=chosen[4], trainer_pp=chosen[5],
                               reference_tp=chosen[4], reference_pp=chosen[5]),
                     exp.workload, cost, 0).meta.extra["steps"][0]["step_time_s"]
            for r in partial_splits(exp, chosen[2], chosen[3])]
    assert (res.best.step_times[0] - min(scan)) / min(scan) <= 0.01


def test_past_the_budget_the_fluid_model_prices_and_says_so(monkeypatch):
    monkeypatch.setattr(fullsize, "SIM_BUDGET_SAMPLES", 0)
    exp = _exp(seeds=3)
    res = search(exp, AnalyticCostModel.for_experiment(exp))
    assert "priced by the fluid model at full size" in res.note
    for c in res.ranked:
        assert c.trace.meta.extra["model"] == "fluid" and len(c.step_times) == 3
    assert res.best.trace.samples and res.best.samples_per_s > 0
