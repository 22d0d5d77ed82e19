"""contention_from_traces recovers host-contention ratios from (here: simulated) traces."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from yatt.core.config import load_experiment
from yatt.core.layout import make_plan
from yatt.core.roles import Mode, ReleasePolicy
from yatt.planner.calibrate import contention_from_traces
from yatt.planner.profile_io import Contention, Profile
from yatt.planner.profiled import cost_model_for
from yatt.sim import simulate

from test_profiled import _tables

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo-cpu.yaml"


def test_ratios_recovered_from_a_contended_run():
    exp = load_experiment(DEMO)
    truth = Contention(busy=2, reload=1.4, offload=1.2, decode=1.5, logprob=1.1, train=1.3)
    hot = cost_model_for(exp, Profile(tables=replace(_tables(), contention=(truth,))))
    free = Profile(tables=_tables())
    traces = []
    for mode in (Mode.COLOCATE, Mode.PARTIAL):
        plan = replace(make_plan(exp, mode), release=ReleasePolicy.TEARDOWN)
        traces.append(simulate(plan, exp.workload, hot, seed=1, steps=3))
    fit = contention_from_traces(traces, lambda e: cost_model_for(e, free))
    assert len(fit) == 1 and fit[0].busy == 2
    for f in ("reload", "offload", "decode", "logprob", "train"):
        assert getattr(fit[0], f) == pytest.approx(getattr(truth, f), rel=0.02), f
    # a contention-free run fits to no slow-down
    plain = [simulate(replace(make_plan(exp, Mode.COLOCATE), release=ReleasePolicy.TEARDOWN),
                      exp.workload, cost_model_for(exp, free), seed=1, steps=3)]
    again = contention_from_traces(plain, lambda e: cost_model_for(e, free))
    assert all(getattr(again[0], f) == pytest.approx(1.0, abs=1e-6)
               for f in ("reload", "offload", "decode", "logprob", "train"))
