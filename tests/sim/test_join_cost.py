"""CostModel.prefill_join_time: the optional term that prices a request's prefill when it
joins a batch that is already decoding (a mixed step). Streamed GenRM requests join; a batch that
enters an idle engine does not."""
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from fakecost import FakeCostModel
from helpers import experiment, extension_pair, phase_busy, workload
from yatt.core import Mode, Phase
from yatt.sim import make_plan, simulate


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
    a, b = extension_pair(FakeCostModel(), JoinPricey(), "prefill_join_time")
    assert phase_busy(b, Phase.GENRM) > phase_busy(a, Phase.GENRM) + 0.05


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
