"""Replay: same plan reproduces the recorded step time; what-if rows; pandas frames."""
from __future__ import annotations

import dataclasses

import pytest

from yatt.core import Mode, Phase, Trace
from yatt.planner.costmodel import AnalyticCostModel
from yatt.planner.frames import parquet_available, read_frames, trace_frames, write_parquet
from yatt.planner.replay import renumbered, replay, what_if

from _trace_helpers import TRUTH, synthetic_trace


@pytest.fixture(scope="module")
def trace() -> Trace:
    return synthetic_trace(steps=3)


def _cost(exp):
    return AnalyticCostModel.for_experiment(exp, TRUTH)


# The trace was simulated with the cost model the replay uses, so replaying it runs the
# same arithmetic on the same lengths: step times and phase seconds are equal, not close.


def test_replay_same_plan_reproduces_step_time(trace):
    rep = replay(trace, _cost(trace.meta.plan.experiment))
    assert rep.predicted.step_times() == trace.step_times()
    assert rep.predicted_stats.step_time_mean == rep.recorded_stats.step_time_mean
    for row in rep.phases():
        assert row.predicted_s == row.recorded_s, row


def test_replay_maps_step_ids_back(trace):
    shifted = Trace(trace.meta, tuple(dataclasses.replace(s, step=s.step + 5) for s in trace.samples),
                    tuple(dataclasses.replace(s, step=s.step + 5) for s in trace.spans))
    rep = replay(shifted, _cost(trace.meta.plan.experiment))
    assert rep.steps == (5, 6, 7)
    assert rep.predicted.steps() == [5, 6, 7]
    assert {s.step for s in renumbered(shifted, [6])} == {0}
    assert list(rep.predicted.step_times().values()) == list(trace.step_times().values())


def test_replay_uses_recorded_lengths_not_resampled(trace):
    exp = trace.meta.plan.experiment
    other = dataclasses.replace(trace.meta, seed=trace.meta.seed + 99)
    rep = replay(Trace(other, trace.samples, trace.spans), _cost(exp))
    assert rep.predicted.step_times() == trace.step_times()
    assert [s.response_tokens for s in rep.predicted.samples] == [s.response_tokens for s in trace.samples]


def test_what_if_other_mode_and_twice_the_gpus(trace):
    rep = replay(trace, _cost(trace.meta.plan.experiment))
    rows = what_if(trace, rep, _cost, sizes=[16, 32], modes=[Mode.COLOCATE, Mode.PARTIAL])
    assert {(w.gpus, w.mode) for w in rows} == {(16, Mode.COLOCATE), (16, Mode.PARTIAL),
                                                (32, Mode.COLOCATE), (32, Mode.PARTIAL)}
    best16 = min(w.step_s for w in rows if w.gpus == 16)
    assert best16 <= rep.predicted_stats.step_time_mean * 1.0001  # the search can only improve
    for w in rows:
        assert w.speedup == pytest.approx(rep.predicted_stats.step_time_mean / w.step_s)
        assert w.plan.cluster.num_gpus == w.gpus


def test_frames_per_kind(tmp_path, trace):
    p = tmp_path / "t.jsonl.gz"
    trace.write_jsonl(p)
    f = read_frames(p)
    assert set(f) == {"meta", "sample", "span"}
    assert len(f["sample"]) == len(trace.samples) and len(f["span"]) == len(trace.spans)
    assert f["meta"]["source"][0] == "simulated"
    assert set(f["span"]["phase"]) >= {Phase.ROLLOUT.value, Phase.TRAIN.value}
    assert (f["span"]["duration_s"] >= 0).all()
    import pandas as pd

    raw = pd.read_json(p, lines=True)  # the file itself is pandas-readable
    assert (raw["kind"] == "sample").sum() == len(trace.samples)
    assert trace_frames(trace)["sample"]["response_tokens"].sum() == sum(s.response_tokens for s in trace.samples)


def test_parquet_export_or_clean_skip(tmp_path, trace):
    out = write_parquet(trace, tmp_path)
    if parquet_available():
        assert out and all(p.exists() for p in out)
    else:
        assert out is None and not list(tmp_path.iterdir())


def test_median_steps_is_the_median_of_each_sides_step_times():
    """The longest step slowed 10x on the recorded side moves the mean step time, not the
    median (the steps keep their order, so the middle one is the same step)."""
    import statistics

    base = synthetic_trace(steps=5)
    before = base.step_times()
    slow = max(before, key=before.get)
    t0 = min(s.start_s for s in base.spans if s.step == slow)
    spans = tuple(dataclasses.replace(s, end_s=t0 + (s.end_s - t0) * 10) if s.step == slow else s
                  for s in base.spans)
    recorded = Trace(base.meta, base.samples, spans)
    rep = replay(recorded, _cost(recorded.meta.plan.experiment))
    times = recorded.step_times()
    want = statistics.median(times[k] for k in rep.steps)
    measured, predicted = rep.median_steps()
    assert measured == want
    assert predicted == statistics.median(rep.predicted.step_times()[k] for k in rep.steps)
    # same cost model and lengths: every step predicts as simulated, so the medians agree
    # (to float rounding of the span arithmetic) while the means differ by the slowed step
    assert predicted == pytest.approx(measured, rel=1e-9)
    assert rep.step_error > 0.5 or rep.step_error < -0.5
