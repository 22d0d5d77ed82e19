"""CostModel.contention: the optional term that slows a phase down when several
devices of one host run it at once (CPU "devices" share cores). The simulator says how many
devices are busy; the cost model says how much slower that makes each phase."""
from dataclasses import dataclass, field

import pytest

from fakecost import FakeCostModel
from helpers import experiment, workload
from yatt.core import Mode, Phase, ReleasePolicy, Role
from yatt.sim import make_plan, simulate
from yatt.core import CostModel
from yatt.sim.contention import SlowedEngineCost, engine_cost, slowdown


@dataclass(frozen=True)
class Contended(FakeCostModel):
    """FAKE: every phase runs `per_device` slower per extra busy device."""

    per_device: float = 0.25              # +25% per extra busy device
    calls: list = field(default_factory=list, compare=False)

    def contention(self, phase: Phase, busy: int) -> float:
        self.calls.append((phase, busy))
        return 1.0 + self.per_device * (busy - 1)


def _phase_s(tr, phase):
    # the DP gradient all-reduce (a TRAIN span) is communication: not slowed
    return sum(s.duration for s in tr.spans
               if s.phase is phase and not s.name.startswith("grad_sync"))


def _plan(exp, mode, **kw):
    import dataclasses
    p = make_plan(exp, mode, **kw)
    return dataclasses.replace(p, release=ReleasePolicy.OFFLOAD)


def test_the_default_is_no_contention():
    free, slow = FakeCostModel(), Contended()
    assert type(free).contention is CostModel.contention and free.contention(Phase.RELOAD, 8) == 1.0
    assert slowdown(free, Phase.RELOAD, 8) == 1.0
    assert slowdown(slow, Phase.RELOAD, 1) == 1.0        # one busy device: no contention
    assert slowdown(slow, Phase.RELOAD, 3) == pytest.approx(1.5)
    assert engine_cost(free, Phase.ROLLOUT, 4) is free
    e = engine_cost(slow, Phase.ROLLOUT, 3)
    assert isinstance(e, SlowedEngineCost) and e.factor == pytest.approx(1.5)
    m = experiment(workload()).actor
    assert e.decode_time(m, 1, 8, 800.0, 10) == pytest.approx(1.5 * slow.decode_time(m, 1, 8, 800.0, 10))
    assert e.prefill_time(m, 1, 64) == pytest.approx(1.5 * slow.prefill_time(m, 1, 64))
    assert e.kv_capacity_tokens(m, 1, 0.9) == slow.kv_capacity_tokens(m, 1, 0.9)  # delegated


def test_colocate_phases_slow_down_by_the_busy_device_count():
    w = workload(8, 4, resp=100)
    exp = experiment(w, gpn=4)
    plan = _plan(exp, Mode.COLOCATE)
    free, slow = FakeCostModel(), Contended()
    a, b = simulate(plan, w, free, 3, steps=2), simulate(plan, w, slow, 3, steps=2)
    k = 1.0 + 0.25 * 3  # every role on all 4 devices
    for ph in (Phase.OFFLOAD, Phase.RELOAD, Phase.TRAIN, Phase.REF_LOGPROB):
        assert _phase_s(a, ph) > 0
        assert _phase_s(b, ph) == pytest.approx(k * _phase_s(a, ph), rel=1e-6), ph
    # engines: every prefill and decode is k times slower, so is the generation phase
    for ph in (Phase.ROLLOUT, Phase.GENRM):
        assert _phase_s(b, ph) == pytest.approx(k * _phase_s(a, ph), rel=1e-6), ph
    assert (Phase.ROLLOUT, 4) in slow.calls and (Phase.GENRM, 4) in slow.calls
    assert max(b.step_times().values()) > max(a.step_times().values())
    assert len(a.samples) == len(b.samples)


def test_one_device_cluster_is_contention_free():
    w = workload(4, 2, resp=50)
    exp = experiment(w, gpn=1)
    plan = _plan(exp, Mode.COLOCATE)
    assert simulate(plan, w, FakeCostModel(), 1).step_times() == \
        simulate(plan, w, Contended(), 1).step_times()


def test_partial_counts_rollout_and_genrm_devices_together():
    w = workload(8, 4, resp=100)
    exp = experiment(w, gpn=4)
    plan = _plan(exp, Mode.PARTIAL, rollout_devices=3)
    slow = Contended()
    simulate(plan, w, slow, 3)
    busy = {ph: {n for p, n in slow.calls if p is ph} for ph in Phase}
    assert busy[Phase.ROLLOUT] == {4} and busy[Phase.GENRM] == {4}   # 3 rollout + 1 GenRM
    assert busy[Phase.TRAIN] == {len(plan.placement(Role.TRAINER).devices)}
