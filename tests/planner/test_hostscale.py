"""The host rescale (`yatt.planner.hostscale`): pure arithmetic on a small profile built
here. Every measured term but an engine's teardown follows the probe's Python part (the
matmul part does not move the tables of the small models a CPU profile measures; teardown is
kernel work and stays); a profile with only the whole probe rescales the same terms by that
one ratio;
ratios and counts stay; the band's message names the refresh command; a profile made on
the probing machine and boot stays as measured while the probe is inside the band."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from yatt.core.config import load_experiment
from yatt.core.plan import Parallel
from yatt.core.roles import ReleasePolicy, Role
from yatt.planner.hostscale import (
    HOST_RATIO_BAND,
    HostProbe,
    HostRatios,
    drift_line,
    for_host,
    host_line,
    host_ratios,
    own_drift,
    refresh_command,
    rescale_profile,
    stale_line,
)
from yatt.planner.profile_io import (
    Contention,
    EngineTable,
    ModelTables,
    Profile,
    ProfileTables,
)
from yatt.planner.profiled import ProfiledCostModel, cost_model_for

ROOT = Path(__file__).resolve().parents[2]
PY, MM = 0.004, 0.010          # the probe's parts when "profiled"


def _profile(parts: bool = True) -> Profile:
    eng = EngineTable(start_s=2.0, stop_s=1.5, decode=((1.0, 20.0, 0.005), (16.0, 20.0, 0.008),
                                                       (8.0, 68.0, 0.007)),
                      prefill=((1.0, 16.0, 0.007), (8.0, 32.0, 0.012)),
                      join=((4.0, 1.0, 24.0, 0.001), (8.0, 8.0, 64.0, 0.009)),
                      call=((2.0, 0.01), (32.0, 0.016)), contention=((2.0, 1.1),),
                      restart=((1e7, 1.8, 1.4), (4e8, 2.0, 1.5)))
    actor = ModelTables(train=((1.0, 16.0, 0.02), (8.0, 32.0, 0.04), (4.0, 128.0, 0.06)),
                        logprob=((1.0, 16.0, 0.005), (8.0, 32.0, 0.01)), engine=eng,
                        weight_sync_s=0.02, stop_len=(3, 5, 64), stop_cap=64,
                        train_tp=((2.0, 8.0, 32.0, 0.06),), train_dp=((2.0, 8.0, 32.0, 0.05),),
                        sync=((1.0, 0.05), (2.0, 0.055)))
    genrm = ModelTables(engine=dataclasses.replace(eng, start_s=3.0, stop_s=2.0))
    t = ProfileTables(rpc_s=0.001, models={"tiny-actor": actor, "tiny-genrm": genrm},
                      contention=(Contention(busy=2, reload=1.1, decode=1.05, train=1.07),),
                      transfer=((1e6, 0.004), (4e6, 0.01)), handoff_s=0.002,
                      host_probe_s=PY + MM, host_probe_python_s=PY if parts else 0.0,
                      host_probe_matmul_s=MM if parts else 0.0)
    return Profile(tables=t, source="yatt profile demo-cpu --device cpu")


def _times(rows) -> list[float]:
    return [r[-1] for r in rows]


def test_split_profile_rescales_every_term_by_the_interpreter_part():
    prof = _profile()
    now = HostProbe(python_s=PY * 2.0, matmul_s=MM * 0.5)   # interpreter slower, matmuls faster
    r = host_ratios(prof.tables, now)
    whole = (PY * 2.0 + MM * 0.5) / (PY + MM)
    assert r.split and r.interpreter == pytest.approx(2.0) and r.matmul == pytest.approx(0.5)
    assert r.whole == pytest.approx(whole) and r.compute == pytest.approx(2.0)
    new = rescale_profile(prof, r, now)
    a0, a1 = prof.tables.models["tiny-actor"], new.tables.models["tiny-actor"]
    # interpreter-bound: x2
    assert new.tables.rpc_s == pytest.approx(0.002) and new.tables.handoff_s == pytest.approx(0.004)
    assert _times(new.tables.transfer) == pytest.approx([0.008, 0.02])
    assert a1.engine.start_s == pytest.approx(4.0)
    assert a1.engine.stop_s == a0.engine.stop_s          # teardown: as measured
    assert a1.weight_sync_s == pytest.approx(0.04)
    assert _times(a1.sync) == pytest.approx([0.1, 0.11])
    assert _times(a1.engine.call) == pytest.approx([0.02, 0.032])
    assert [x for row in a1.engine.restart for x in row] == pytest.approx(
        [1e7, 3.6, 1.4, 4e8, 4.0, 1.5])
    # the model tables: x2 as well, not the matmul part's x0.5 (rows keep their sizes)
    for name in ("train", "logprob", "train_tp", "train_dp"):
        old_rows, new_rows = getattr(a0, name), getattr(a1, name)
        assert [x[:-1] for x in new_rows] == [x[:-1] for x in old_rows]
        assert _times(new_rows) == pytest.approx([t * 2.0 for t in _times(old_rows)], rel=1e-4)
    for name in ("decode", "prefill", "join"):
        assert _times(getattr(a1.engine, name)) == pytest.approx(
            [t * 2.0 for t in _times(getattr(a0.engine, name))], rel=1e-3)
    # ratios and counts stay
    assert new.tables.contention == prof.tables.contention
    assert a1.engine.contention == a0.engine.contention
    assert a1.stop_len == a0.stop_len and a1.stop_cap == a0.stop_cap
    # the analytic fallback's overheads copied from the tables follow the interpreter
    assert new.efficiency.engine_start_s == pytest.approx(prof.efficiency.engine_start_s * 2.0)
    assert new.efficiency.switch_overhead_s == prof.efficiency.switch_overhead_s   # teardown
    # the rescaled profile records the probe it was carried to, and says so
    assert new.tables.host_probe_s == pytest.approx(now.total_s)
    assert new.tables.host_probe_python_s == pytest.approx(now.python_s)
    assert "rescaled to this host" in new.source and prof.source in new.source


def test_rescaled_cost_model_prices_each_term_by_its_ratio():
    """Through the profiled cost model: a re-create costs (start_s + rpc) x interpreter, and
    so does a decode step (a linear fit of the rescaled points); a teardown keeps its
    measured seconds, only the Ray round trip around it moves."""
    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    prof = _profile()
    now = HostProbe(python_s=PY * 1.25, matmul_s=MM * 0.8)
    r = host_ratios(prof.tables, now)
    old, new = cost_model_for(exp, prof), cost_model_for(exp, rescale_profile(prof, r, now))
    assert isinstance(new, ProfiledCostModel)
    par = Parallel(1, 1, 1)
    assert new.reload_time(exp.genrm, Role.GENRM, par, ReleasePolicy.TEARDOWN) == pytest.approx(
        old.reload_time(exp.genrm, Role.GENRM, par, ReleasePolicy.TEARDOWN) * 1.25)
    rpc = prof.tables.rpc_s
    assert new.offload_time(exp.genrm, Role.GENRM, par, ReleasePolicy.TEARDOWN) == pytest.approx(
        old.offload_time(exp.genrm, Role.GENRM, par, ReleasePolicy.TEARDOWN) + rpc * 0.25)
    # 6-decimal rounding of the rescaled points: relative error <= 0.5e-6 / 0.005
    assert new.decode_step_time(exp.actor, 1, 8, 40.0) == pytest.approx(
        old.decode_step_time(exp.actor, 1, 8, 40.0) * 1.25, rel=2e-4)


def test_whole_probe_profile_rescales_everything_by_one_ratio():
    prof = _profile(parts=False)
    now = HostProbe(python_s=PY * 2.0, matmul_s=MM * 0.5)
    r = host_ratios(prof.tables, now)
    assert not r.split and r.interpreter == r.compute == r.whole
    new = rescale_profile(prof, r, now)
    a = new.tables.models["tiny-actor"]
    assert a.engine.start_s == pytest.approx(2.0 * r.whole) and a.engine.stop_s == 1.5
    assert _times(a.train) == pytest.approx([t * r.whole for t in (0.02, 0.04, 0.06)], rel=1e-4)
    assert new.tables.host_probe_python_s == 0.0   # still no parts recorded


def test_rescale_by_the_recorded_probe_changes_nothing():
    prof = _profile()
    now = HostProbe(python_s=PY * 0.9, matmul_s=MM * 0.85)
    once = rescale_profile(prof, host_ratios(prof.tables, now), now)
    again = rescale_profile(once, host_ratios(once.tables, now), now)
    assert again.tables == once.tables


def test_no_recorded_probe_gives_no_ratio():
    prof = _profile()
    t = dataclasses.replace(prof.tables, host_probe_s=0.0)
    assert host_ratios(t, HostProbe(PY, MM)) is None
    assert host_ratios(prof.tables, HostProbe(0.0, 0.0)) is None


@pytest.mark.parametrize("whole,stale", [(1.0, False), (1.17, False), (0.86, False),
                                          (1.19, True), (0.84, True), (0.5, True)])
def test_band_and_its_one_line(whole, stale):
    r = HostRatios(whole=whole, interpreter=whole, compute=whole)
    assert r.outside_band() is stale
    line = stale_line(r, "configs/fidelity/short.yaml")
    if not stale:
        assert line is None
        return
    assert "\n" not in line and "different host" in line
    assert f"`{refresh_command('configs/fidelity/short.yaml')}`" in line
    assert "yatt profile configs/fidelity/short.yaml --device cpu --quick -o profile.yaml" in line
    assert f"x{1 / HOST_RATIO_BAND:.2f}-x{HOST_RATIO_BAND:.2f}" in line


def test_interpreter_part_alone_can_leave_the_band():
    r = HostRatios(whole=1.05, interpreter=1.3, compute=1.3, matmul=0.9)
    assert r.outside_band()
    assert "every term but engine teardown x1.30" in host_line(r) and "\n" not in host_line(r)
    # the line names the ratio that left the band, not the whole probe inside it
    assert "its interpreter part x1.30, outside" in stale_line(r, "exp.yaml")


def test_probe_from_samples_takes_each_parts_median():
    # an outlier in one part moves neither median
    parts = [(1.0, 4.0), (9.0, 2.0), (2.0, 3.0)]
    assert HostProbe.from_parts(parts) == HostProbe(python_s=2.0, matmul_s=3.0)


def test_a_probe_recorded_in_a_trace_reads_back():
    from yatt.planner.hostscale import RECORD_KEYS, HostProbe

    p = HostProbe(python_s=0.0031234567, matmul_s=0.0109876543)
    rec = p.record()
    assert set(rec) == set(RECORD_KEYS)
    back = HostProbe.from_record(rec)
    assert back.python_s == pytest.approx(p.python_s, abs=1e-6)
    assert back.matmul_s == pytest.approx(p.matmul_s, abs=1e-6)
    # a trace without one, or with a broken one, has none
    for extra in ({}, {RECORD_KEYS[0]: 0.003}, {RECORD_KEYS[0]: "x", RECORD_KEYS[1]: 0.01},
                  {RECORD_KEYS[0]: 0.0, RECORD_KEYS[1]: 0.01}, {RECORD_KEYS[0]: None, RECORD_KEYS[1]: 1}):
        assert HostProbe.from_record(extra) is None, extra


def test_a_host_id_recorded_in_a_trace_reads_back():
    from yatt.planner.hostscale import HOST_ID_KEY

    p = HostProbe(python_s=0.003, matmul_s=0.011, host_id="0123456789abcdef")
    rec = p.record()
    assert rec[HOST_ID_KEY] == p.host_id and HostProbe.from_record(rec) == p
    # a probe of an unknown machine records no id; a broken id reads back as unknown
    assert HOST_ID_KEY not in HostProbe(0.003, 0.011).record()
    assert HostProbe.from_record({**rec, HOST_ID_KEY: 7}).host_id == ""


ME = "feedc0de00000001"


@pytest.mark.parametrize("profile_id,probe_id,py_ratio,mm_ratio,kept", [
    (ME, ME, 1.0, 1.0, True),                # the same machine, the same speed
    (ME, ME, 1.15, 1.1, True),               # its own drift, inside the band
    (ME, ME, 1 / 1.15, 1.0, True),
    # the Python part alone flipping to its other speed (x0.56 on one VM): still drift,
    # the whole probe stays inside the band
    (ME, ME, 0.56, 1.0, True),
    (ME, ME, HOST_RATIO_BAND * 1.05, HOST_RATIO_BAND * 1.05, False),  # the whole host moved
    (ME, ME, 0.8, 0.8, False),
    (ME, "feedc0de00000002", 1.0, 1.0, False),   # another machine or boot: rescaled
    ("", "", 1.0, 1.0, False),               # ids not recorded: another host
    ("", ME, 1.0, 1.0, False),               # the shipped profile on any machine
])
def test_own_drift_keeps_a_profile_made_here_as_measured(profile_id, probe_id, py_ratio,
                                                          mm_ratio, kept):
    prof = _profile()
    prof = dataclasses.replace(prof, tables=dataclasses.replace(prof.tables, host_id=profile_id))
    now = HostProbe(python_s=PY * py_ratio, matmul_s=MM * mm_ratio, host_id=probe_id)
    r = host_ratios(prof.tables, now)
    assert own_drift(prof.tables, now, r) is kept
    got, applied = for_host(prof, now)
    if kept:
        assert got is prof and applied is None
        line = drift_line(r)
        assert f"interpreter x{py_ratio:.2f}" in line and "as measured" in line
    else:
        assert applied == r
        eng = got.tables.models["tiny-actor"].engine
        assert eng.start_s == pytest.approx(2.0 * r.interpreter, abs=1e-6)
        # the rescaled profile is this host's now: the same probe again changes nothing
        assert got.tables.host_id == probe_id
        assert for_host(got, now)[0].tables == got.tables


def test_for_host_without_a_probe_keeps_the_profile():
    prof = _profile()
    assert for_host(prof, None) == (prof, None)
    eff_only = dataclasses.replace(prof, tables=None)
    assert for_host(eff_only, HostProbe(PY, MM)) == (eff_only, None)
