"""Searching trainer pipeline parallelism: the 70B-on-16-H100 case plans and says why it
uses PP, the fp32 case says in numbers why nothing fits, the executor's search keeps PP at
1, and a partial-only search still picks the trainer's layout."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from yatt.core import InputError, Mode, Role, SearchSpec
from yatt.core.config import load_experiment
from yatt.core.runnable import executor_search
from yatt.core.specs import AdamMoments
from yatt.planner.costmodel import AnalyticCostModel
from yatt.planner.search import search
from yatt.planner.space import placement_space

from test_search import _exp

ROOT = Path(__file__).resolve().parents[2]
LLAMA70B = ROOT / "configs" / "llama70b-h100x16.yaml"


@pytest.fixture(scope="module")
def exp70():
    return load_experiment(LLAMA70B)


def test_70b_actor_plans_on_16_h100_with_a_pipeline(exp70):
    res = search(exp70, AnalyticCostModel.for_experiment(exp70), seeds=1)
    tr = res.best.plan.placement(Role.TRAINER)
    assert tr.pp > 1 and tr.tp * tr.pp >= 16
    assert all(pp > 1 for _, pp in res.space.trainer_layouts)
    assert "Llama-3.1-70B needs TP×PP ≥ 16 to fit" in res.trainer_note
    assert "at tp8·dp2 weights+grads+optimizer alone need 88.2 GB of 80 GB per device" in res.trainer_note


def test_70b_with_fp32_adam_moments_fits_nowhere_and_says_so(exp70):
    fp32 = dataclasses.replace(exp70, algo=dataclasses.replace(exp70.algo, adam_moments=AdamMoments.FP32))
    with pytest.raises(InputError) as ei:
        search(fp32, AnalyticCostModel.for_experiment(fp32))
    msg = str(ei.value)
    assert "training state does not fit at any TP×PP (TP in [1, 2, 4, 8], PP in [1, 2, 4, 8])" in msg
    assert "83.6 GB of 80 GB per device, at tp8·pp2·dp1" in msg
    assert "with algo.adam_moments: bf16" in msg and "tp8·pp2 fits" in msg


def test_without_pp_choices_the_70b_trainer_fits_nowhere(exp70):
    flat = dataclasses.replace(exp70, search=dataclasses.replace(exp70.search, pp_choices=(1,)))
    assert "does not fit at any TP×PP" in placement_space(flat).problems[0]


def test_executor_search_keeps_every_trainer_pp_and_engine_tp():
    """The executor runs a pipelined trainer and engines at any TP (core.runnable), so the
    search it plans with keeps the configured choices."""
    s = executor_search(SearchSpec(pp_choices=(1, 2, 4), tp_choices=(1, 2, 4)))
    assert s.pp_choices == (1, 2, 4) and s.engine_tps == (1, 2, 4)
    with pytest.raises(InputError, match="pp_choices"):
        SearchSpec(pp_choices=())
    with pytest.raises(InputError, match=r"pp_choices\[1\]"):
        SearchSpec(pp_choices=(1, 0))


def test_partial_only_search_picks_the_trainer_layout():
    """Without a full-colocate search to choose it, the partial search tries every trainer
    layout and finds the exhaustive optimum."""
    exp = _exp(gpus=8, genrm="Qwen2.5-7B")
    exp = dataclasses.replace(exp, search=dataclasses.replace(exp.search, modes=(Mode.PARTIAL,)))
    cost = AnalyticCostModel.for_experiment(exp)
    fast = search(exp, cost, seeds=1)
    full = search(exp, cost, seeds=1, exhaustive=True)
    assert len(fast.space.trainer_layouts) > 1
    assert fast.best.step_times[0] == pytest.approx(full.best.step_times[0], rel=1e-9)
    assert fast.simulations < full.simulations


def test_breakdown_shows_the_smallest_fitting_trainer_layout(exp70):
    from yatt.planner.breakdown import role_facts

    facts = {f.role: f for f in role_facts(exp70, AnalyticCostModel.for_experiment(exp70))}
    t = facts[Role.TRAINER]
    assert (t.min_tp, t.min_pp, t.layout) == (8, 2, "8·pp2")
    assert t.mem is not None and t.mem.fits() and t.unit_costs
