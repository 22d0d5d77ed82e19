"""contention_from_traces recovers host-contention ratios from (here: simulated) traces."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from yatt.core.config import load_experiment
from yatt.core.errors import InputError
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
    fit = contention_from_traces(traces, lambda t: cost_model_for(t.meta.plan.experiment, free))
    assert len(fit) == 1 and fit[0].busy == 2
    for f in ("reload", "offload", "decode", "logprob", "train"):
        assert getattr(fit[0], f) == pytest.approx(getattr(truth, f), rel=0.02), f
    # a contention-free run fits to no slow-down
    plain = [simulate(replace(make_plan(exp, Mode.COLOCATE), release=ReleasePolicy.TEARDOWN),
                      exp.workload, cost_model_for(exp, free), seed=1, steps=3)]
    again = contention_from_traces(plain, lambda t: cost_model_for(t.meta.plan.experiment, free))
    assert all(getattr(again[0], f) == pytest.approx(1.0, abs=1e-6)
               for f in ("reload", "offload", "decode", "logprob", "train"))


def test_a_profile_takes_the_contention_its_measured_traces_show(tmp_path, capsys):
    """`yatt calibrate TRACE... --profile P`: P's shared contention ratios fitted to the
    shipped measured traces (real executor runs), every other table kept."""
    from yatt.cli.main import main
    from yatt.core.trace import Trace
    from yatt.planner.calibrate import calibrate_contention
    from yatt.planner.profile_io import load_profile

    from yatt.planner.profile_io import save_profile

    root = DEMO.parents[1]
    shipped = root / "configs" / "profiles" / "cpu-local.yaml"
    traces = sorted((root / "traces").glob("measured-*.jsonl.gz"))
    assert traces, "the measured traces ship in traces/"
    base = load_profile(shipped)
    start = tmp_path / "start.yaml"    # the shipped profile, its contention as yatt profile's bench
    save_profile(replace(base, tables=replace(base.tables, contention=(Contention(busy=2),))), start)
    out = tmp_path / "p.yaml"
    assert main(["calibrate", *map(str, traces), "--profile", str(start), "-o", str(out),
                 "--no-progress"]) == 0
    out_text = capsys.readouterr().out
    assert "the profile's -> measured" in out_text
    # the shipped traces keep the probe timed before their runs: fitted at that host speed
    assert "host speed: 2 of 2 trace(s) recorded the host probe" in out_text
    got = load_profile(out)
    want = calibrate_contention(load_profile(start), [Trace.read_jsonl(t) for t in traces])
    assert got.tables.contention == want.tables.contention
    assert got.tables.contention[0].busy == 2 and got.tables.contention[0].reload > 1.0
    assert replace(got.tables, contention=()) == replace(base.tables, contention=())
    assert "contention fitted to 2 measured trace(s)" in got.source
    # the shipped profile's ratios are these traces' (its source says so): a fixed point
    assert base.tables.contention == got.tables.contention and "contention fitted" in base.source
    # a single-device run has nothing to fit: one line, nothing written
    exp = load_experiment(DEMO)
    one = replace(exp, cluster=replace(exp.cluster, gpus_per_node=1))
    plan = replace(make_plan(one, Mode.COLOCATE), release=ReleasePolicy.TEARDOWN)
    lone = simulate(plan, one.workload, cost_model_for(one, base), seed=1, steps=3)
    with pytest.raises(InputError, match="2 or more devices busy"):
        calibrate_contention(base, [lone])


def test_a_runs_recorded_host_speed_is_not_taken_for_contention():
    """A run on a host 1.25x slower than at profile time, with no contention at all: fitted
    against the profile rescaled to the probe the run recorded, the ratios are 1.0; without
    the record they would absorb the host's speed (all but teardown's, which the rescale
    leaves as measured)."""
    from yatt.planner.calibrate import calibrate_contention
    from yatt.planner.hostscale import HostProbe, host_ratios, rescale_profile

    exp = load_experiment(DEMO)
    base = Profile(tables=replace(_tables(), host_probe_s=0.014, host_probe_python_s=0.004,
                                  host_probe_matmul_s=0.010))
    now = HostProbe(python_s=0.005, matmul_s=0.0125)            # both parts 1.25x slower
    slow = rescale_profile(base, host_ratios(base.tables, now), now)
    plan = replace(make_plan(exp, Mode.COLOCATE), release=ReleasePolicy.TEARDOWN)
    run = simulate(plan, exp.workload, cost_model_for(exp, slow), seed=1, steps=3)
    recorded = replace(run, meta=replace(run.meta, extra={**run.meta.extra, **now.record()}))
    assert HostProbe.from_record(recorded.meta.extra) == now
    fit = calibrate_contention(base, [recorded]).tables.contention[0]
    blind = calibrate_contention(base, [run]).tables.contention[0]
    for f in ("reload", "offload", "train"):
        assert getattr(fit, f) == pytest.approx(1.0, abs=0.01), f
        assert getattr(blind, f) == pytest.approx(1.0 if f == "offload" else 1.25, rel=0.05), f
