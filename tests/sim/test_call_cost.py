"""CostModel.engine_call_time: the optional term for what one call handing an engine k
requests costs beyond the engine's steps. Each engine owes it per batch call and per streamed
hand-off it receives; a charge that arrives while the engine decodes is paid, not lost."""
from dataclasses import dataclass

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from fakecost import FakeCostModel
from helpers import GENRM_BIG, experiment, extension_pair, phase_busy, workload
from yatt.core import Mode, Phase, Role
from yatt.sim import make_plan, simulate
from yatt.sim.engine import GenEngine, Router


@dataclass(frozen=True)
class CallPricey(FakeCostModel):
    """FAKE: a call costs `a` plus `b` per request."""

    a: float = 0.02
    b: float = 0.001

    def engine_call_time(self, model, requests: int) -> float:
        return self.a + self.b * requests


def test_streamed_hand_offs_and_batch_calls_cost_their_engines():
    """Partial, 8 prompts x 4 on 4 rollout engines: round 0 goes out as one batch call per
    rollout engine (8 requests each), and each streamed hand-off is one call to the GenRM
    engine that receives it. With the GenRM's own work free, its engines are busy exactly
    while they pay those calls."""
    free, priced = FakeCostModel(genrm_scale=0.0), CallPricey(genrm_scale=0.0)
    a, b = extension_pair(free, priced, "engine_call_time")
    w = workload(8, 4, resp=100)
    engines = len(make_plan(experiment(w), Mode.PARTIAL, rollout_devices=4)
                  .placement(Role.ROLLOUT).groups())
    per_engine = w.samples_per_step // engines
    rollout_grown = phase_busy(b, Phase.ROLLOUT) - phase_busy(a, Phase.ROLLOUT)
    assert rollout_grown == pytest.approx(engines * (priced.a + priced.b * per_engine), rel=1e-9)
    # one hand-off per finishing instant (the 32 samples' lengths all differ: one each)
    handoffs = len({s.rollout_end_s for s in b.samples})
    assert handoffs == w.samples_per_step
    assert phase_busy(a, Phase.GENRM) == 0.0
    assert phase_busy(b, Phase.GENRM) == pytest.approx(handoffs * (priced.a + priced.b), rel=1e-9)


def test_a_colocate_batch_pays_one_call_per_engine():
    """Colocate: each engine gets its share of the batch in one call, so each phase's
    engine-busy time grows by exactly one call per engine (the engines run in parallel)."""
    w = workload(4, 2, resp=50)
    col = make_plan(experiment(w), Mode.COLOCATE)
    a, b = simulate(col, w, FakeCostModel(), 3), simulate(col, w, CallPricey(b=0.0), 3)
    engines = len(col.placement(Role.ROLLOUT).groups())
    grown = phase_busy(b, Phase.ROLLOUT) - phase_busy(a, Phase.ROLLOUT)
    assert grown == pytest.approx(0.02 * engines, rel=1e-6)


def _engine(env, out, call_s=None):
    ends = []
    e = GenEngine(env, (0,), GENRM_BIG, 1, FakeCostModel(), 10 ** 6, 8, [16] * 4, out, [0.0] * 4,
                  lambda _e, done, now: ends.extend([now] * len(done)), call_s=call_s)
    return e, ends


@settings(max_examples=20, deadline=None)
@given(st.floats(0.0, 2.0), st.floats(0.001, 0.5))
def test_a_charge_arriving_mid_decode_is_paid_once(at, c):
    """A charge owed while a full engine decodes (no room, so no interrupt) delays what
    follows by exactly the charge: it is neither lost at the interval's end nor paid twice."""
    def run(charge: bool) -> float:
        env = simpy.Environment()
        e, ends = _engine(env, [200, 200, 200, 200], call_s=lambda n: c * n)
        e.max_seqs = 1
        for i in range(2):
            e.submit(i)

        def later():
            yield env.timeout(at)
            if charge:
                e.charge(1)
            e.close()
        env.process(later())
        env.run()
        return max(ends)

    assert run(True) - run(False) == pytest.approx(c, rel=1e-6, abs=1e-9)


def test_router_charges_each_engine_it_hands_requests():
    env = simpy.Environment()
    calls = []
    engines = [GenEngine(env, (k,), GENRM_BIG, 1, FakeCostModel(), 10 ** 6, 8, [16] * 10, [4] * 10,
                         [0.0] * 10, lambda *_: None, call_s=lambda n: calls.append(n) or 0.0)
               for k in range(2)]
    r = Router(env, engines)
    r.submit_all(list(range(5)))
    assert sorted(calls) == [2, 3]
    calls.clear()
    r.submit([5])
    assert calls == [1]
