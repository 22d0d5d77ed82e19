"""Calibration: recovers known coefficients; refuses under-determined fits, saying which."""
from __future__ import annotations

import dataclasses

import pytest

from yatt.core import ClusterSpec, InputError, Phase, Trace, catalog
from yatt.planner.calibrate import Coef, calibrate
from yatt.planner.costmodel import Efficiency

from _trace_helpers import TRUTH, synthetic_trace


@pytest.fixture(scope="module")
def trace() -> Trace:
    return synthetic_trace(steps=4)


def test_recovers_known_coefficients_within_5_percent(trace):
    cal = calibrate([trace], start=Efficiency(), holdout=1)
    assert set(cal.fitted) == set(Coef) - {Coef.ENGINE_START}
    for c in cal.fitted:
        truth, got = getattr(TRUTH, c.value), getattr(cal.efficiency, c.value)
        assert got == pytest.approx(truth, rel=0.05), c
    errs = {e.phase: e for e in cal.errors}
    assert errs[Phase.ROLLOUT].before > 0.1  # the defaults were really off
    for e in cal.errors:
        assert e.in_sample < 0.01 and e.held_out < 0.01, e
        assert e.n_out > 0
    assert cal.points_out > 0
    prof = cal.profile("test")
    assert prof.fit_error["held_out.train"] < 0.01


def test_refuses_too_few_points_and_says_which(trace):
    one_step = Trace(trace.meta, tuple(s for s in trace.samples if s.step == 0),
                     tuple(s for s in trace.spans if s.step == 0 and s.phase is Phase.WEIGHT_SYNC
                           or (s.step == 0 and s.phase is Phase.TRAIN)))
    with pytest.raises(InputError) as ei:
        calibrate([one_step], holdout=0)
    msg = str(ei.value)
    assert "calibrate needs at least 3 phase measurements to fit 3 coefficients" in msg
    assert "train_mfu, comm_eff, sync_overhead_s" in msg and "(have 2" in msg
    assert "add steps or traces" in msg


def test_only_identifiable_coefficients_are_fitted(trace):
    no_genrm = Trace(trace.meta, trace.samples,
                     tuple(s for s in trace.spans if s.phase not in (Phase.GENRM, Phase.ROLLOUT)))
    cal = calibrate([no_genrm], holdout=1)
    assert Coef.DECODE_BW_EFF not in cal.fitted and Coef.PREFILL_MFU not in cal.fitted
    assert any(c is Coef.DECODE_BW_EFF and "no genrm/rollout spans" in why for c, why in cal.skipped)


def test_refuses_mixed_gpu_kinds(trace):
    exp = trace.meta.plan.experiment
    a100 = dataclasses.replace(exp, cluster=ClusterSpec(catalog.gpu("A100-80G"), nodes=2, gpus_per_node=8))
    meta = dataclasses.replace(trace.meta, plan=dataclasses.replace(trace.meta.plan, experiment=a100))
    with pytest.raises(InputError, match="different GPU kinds"):
        calibrate([trace, Trace(meta, trace.samples, trace.spans)])
