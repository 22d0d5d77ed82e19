"""The profiled cost model on a pipeline: measured one-device tables scaled by the roofline's
TP/PP ratio, for training and for the forward passes (old and reference log-probs)."""
from __future__ import annotations

import pytest

from yatt.core.plan import Parallel
from yatt.planner.profile_io import Profile
from yatt.planner.profiled import cost_model_for

from test_profiled import _tables


@pytest.fixture(scope="module")
def setup():
    from test_profiled import DEMO
    from yatt.core.config import load_experiment

    exp = load_experiment(DEMO)
    return exp, cost_model_for(exp, Profile(tables=_tables()))


def test_pipeline_scales_the_measured_passes_by_the_roofline_ratio(setup):
    exp, cost = setup
    a, lens = exp.actor, [32] * 6
    one, two = Parallel(1, 1, 1), Parallel(1, 2, 1)   # the tiny actor has 2 layers
    ratio = cost.analytic.pass_time(a, lens, two, False) / cost.analytic.pass_time(a, lens, one, False)
    assert cost.train_time(a, lens, two) == pytest.approx(cost.train_time(a, lens, one) * ratio)
    assert cost.logprob_time(a, lens, two) == pytest.approx(cost.logprob_time(a, lens, one) * ratio)
    # TP without PP keeps the measured one-device forward (the reference worker's table)
    assert cost.logprob_time(a, lens, Parallel(2, 1, 1)) == cost.logprob_time(a, lens, one)
