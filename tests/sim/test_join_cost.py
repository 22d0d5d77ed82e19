"""CostModel.prefill_join_time: the optional term that prices a request's prefill when it
joins a batch that is already decoding (a mixed step). Streamed GenRM requests join; a batch that
enters an idle engine does not."""
from dataclasses import dataclass

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from fakecost import FakeCostModel
from helpers import GENRM_BIG, experiment, extension_pair, phase_busy, workload
from yatt.core import Mode, Phase
from yatt.sim import make_plan, simulate
from yatt.sim.engine import GenEngine


@dataclass(frozen=True)
class JoinPricey(FakeCostModel):
    """FAKE: joining costs a fixed `join_s` per request."""

    join_s: float = 0.05

    def prefill_join_time(self, model, tp: int, tokens: int) -> float:
        return self.join_s


@dataclass(frozen=True)
class JoinSame(FakeCostModel):
    """FAKE: joining costs exactly the idle-engine prefill."""

    def prefill_join_time(self, model, tp: int, tokens: int) -> float:
        return self.prefill_time(model, tp, tokens)


def test_streamed_genrm_requests_pay_the_join_cost():
    # in a whole step, joining also changes which requests share a batch, so the GenRM's
    # busy time moves by more than the joins' prices; the exact accounting is checked on
    # one engine below
    a, b = extension_pair(FakeCostModel(), JoinPricey(), "prefill_join_time")
    assert phase_busy(b, Phase.GENRM) > phase_busy(a, Phase.GENRM)
    assert phase_busy(b, Phase.ROLLOUT) == phase_busy(a, Phase.ROLLOUT)   # rollout never joins


@settings(max_examples=20, deadline=None)
@given(st.floats(0.01, 2.0), st.floats(0.001, 0.5))
def test_a_request_joining_a_decoding_batch_pays_join_s_not_its_prefill(at, extra):
    """One engine decodes request 0 (200 tokens, several seconds); request 1 arrives at
    `at` and joins the running batch. Pricing its join `extra` seconds above its idle-engine
    prefill delays both completions by exactly `extra`: the join is paid once, in place of
    the prefill."""
    prefill = [0.01, 0.02]

    def run(join_extra: float) -> list[float]:
        env = simpy.Environment()
        ends: dict[int, float] = {}
        e = GenEngine(env, (0,), GENRM_BIG, 1, FakeCostModel(), 10 ** 6, 8, [16, 16], [200, 50],
                      prefill, lambda _e, done, now: ends.update({i: now for i in done}),
                      join_s=[p + join_extra for p in prefill])
        e.submit(0)

        def later():
            yield env.timeout(at)
            e.submit(1)
            e.close()
        env.process(later())
        env.run()
        return [ends[0], ends[1]]

    same, priced = run(0.0), run(extra)
    assert same[0] > at and same[1] > at              # request 0 was still decoding at `at`
    assert [b - a for a, b in zip(same, priced)] == pytest.approx([extra, extra], rel=1e-9, abs=1e-12)


def test_a_batch_entering_an_idle_engine_does_not_join():
    # colocate: every prompt (and every judgment) is submitted at once to idle engines that
    # can hold them all, so nothing joins and the step is unchanged
    w = workload(4, 2, resp=50)
    exp = experiment(w)
    col = make_plan(exp, Mode.COLOCATE)
    assert simulate(col, w, FakeCostModel(), 3).step_times() == \
        simulate(col, w, JoinPricey(join_s=5.0), 3).step_times()


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(10, 200), st.integers(0, 99))
def test_a_join_cost_equal_to_prefill_changes_nothing(prompts, group, resp, seed):
    w = workload(prompts, group, resp=resp)
    exp = experiment(w)
    for mode, kw in ((Mode.PARTIAL, {"rollout_devices": 4}), (Mode.COLOCATE, {})):
        plan = make_plan(exp, mode, **kw)
        a, b = simulate(plan, w, FakeCostModel(), seed), simulate(plan, w, JoinSame(), seed)
        assert a.step_times() == b.step_times()
        assert [s.genrm_end_s for s in a.samples] == [s.genrm_end_s for s in b.samples]
