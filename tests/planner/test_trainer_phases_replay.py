"""Replay and calibration read the trainer's new passes: a trace with a PP trainer,
mini-batches and a recomputed old-log-prob pass replays exactly, and an old-log-prob
measurement identifies the training MFU."""
from __future__ import annotations

import dataclasses

import pytest

from yatt.core import AlgoSpec, Mode, Phase, Role, Trace
from yatt.core.specs import OldLogprobs
from yatt.planner.calibrate import Coef, calibrate
from yatt.planner.costmodel import AnalyticCostModel, Efficiency
from yatt.planner.replay import replay
from yatt.sim import make_plan, simulate

from _trace_helpers import TRUTH, experiment


@pytest.fixture(scope="module")
def trace() -> Trace:
    exp = experiment()
    algo = dataclasses.replace(exp.algo, mini_batches=2, old_logprobs=OldLogprobs.RECOMPUTE)
    exp = dataclasses.replace(exp, algo=algo)
    plan = make_plan(exp, Mode.COLOCATE, genrm_tp=2, trainer_tp=2, trainer_pp=2)
    return simulate(plan, exp.workload, AnalyticCostModel.for_experiment(exp, TRUTH), 0, steps=4)


def test_replay_reproduces_every_trainer_pass(trace):
    rep = replay(trace, AnalyticCostModel.for_experiment(trace.meta.plan.experiment, TRUTH))
    rows = {(r.phase, r.role): r for r in rep.phases()}
    assert (Phase.OLD_LOGPROB, Role.TRAINER) in rows
    for row in rows.values():
        assert row.predicted_s == pytest.approx(row.recorded_s, rel=1e-9), row
    assert trace.meta.plan.placement(Role.TRAINER).pp == 2


def test_old_logprob_spans_alone_identify_the_training_mfu(trace):
    only = Trace(trace.meta, trace.samples,
                 tuple(s for s in trace.spans if s.phase is Phase.OLD_LOGPROB))
    cal = calibrate([only], start=Efficiency(), holdout=1)
    assert set(cal.fitted) == {Coef.TRAIN_MFU}
    assert cal.efficiency.train_mfu == pytest.approx(TRUTH.train_mfu, rel=0.02)
