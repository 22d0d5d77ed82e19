"""The CostModel contract's optional terms are neutral: a cost model that implements only
the abstract terms simulates exactly as the simulator does without those terms (no
hand-off cost, joins priced like prefill, free engine calls, no contention)."""
import pytest

from fakecost import FakeCostModel
from helpers import experiment, workload
from yatt.core import CostModel, Mode, Phase
from yatt.core.costmodel import DelegatingCostModel
from yatt.sim import make_plan, simulate

OPTIONAL = ("prefill_join_time", "engine_call_time", "stream_handoff_time", "contention",
            "engine_contention")

# step times of these steps under FakeCostModel, simulated without any optional term
GOLDEN = {
    Mode.COLOCATE: {0: 12.956083941539088, 1: 6.760427200057045},
    Mode.PARTIAL: {0: 6.536445597817428, 1: 4.4752851885869624},
}


class Minimal(CostModel):
    """FAKE: only the abstract terms, each answered by a FakeCostModel."""

    def __init__(self) -> None:
        self.f = FakeCostModel()

    def train_time(self, model, seq_lens, par):
        return self.f.train_time(model, seq_lens, par)

    def grad_sync_time(self, model, par):
        return self.f.grad_sync_time(model, par)

    def logprob_time(self, model, seq_lens, par):
        return self.f.logprob_time(model, seq_lens, par)

    def prefill_time(self, model, tp, tokens):
        return self.f.prefill_time(model, tp, tokens)

    def decode_time(self, model, tp, batch, ctx_sum, steps):
        return self.f.decode_time(model, tp, batch, ctx_sum, steps)

    def decode_step_time(self, model, tp, batch, mean_ctx):
        return self.f.decode_step_time(model, tp, batch, mean_ctx)

    def kv_capacity_tokens(self, model, tp, mem_util):
        return self.f.kv_capacity_tokens(model, tp, mem_util)

    def offload_time(self, model, role, par, release):
        return self.f.offload_time(model, role, par, release)

    def reload_time(self, model, role, par, release):
        return self.f.reload_time(model, role, par, release)

    def weight_sync_time(self, model, trainer, rollout_tp, rollout_engines, cross_node):
        return self.f.weight_sync_time(model, trainer, rollout_tp, rollout_engines, cross_node)

    def checkpoint_time(self, model, par):
        return self.f.checkpoint_time(model, par)

    def controller_time(self, samples, bytes_per_sample, controllers):
        return self.f.controller_time(samples, bytes_per_sample, controllers)


def _plan(mode: Mode):
    w = workload(8, 4, resp=100, ds=True, p_equal=0.3)
    kw = {"rollout_devices": 2} if mode is Mode.PARTIAL else {}
    return make_plan(experiment(w, gpn=4), mode, **kw), w


def test_the_optional_terms_are_exactly_the_non_abstract_ones():
    assert set(CostModel.__abstractmethods__).isdisjoint(OPTIONAL)
    public = {n for n in vars(CostModel) if not n.startswith("_")}
    assert public - set(CostModel.__abstractmethods__) == set(OPTIONAL)
    assert all(n not in vars(Minimal) for n in OPTIONAL)


def test_the_defaults_answer_neutral_values():
    m, model = Minimal(), experiment(workload()).actor
    assert m.prefill_join_time(model, 1, 77) == m.prefill_time(model, 1, 77)
    assert m.engine_call_time(model, 16) == 0.0
    assert m.stream_handoff_time(16) == 0.0
    assert all(m.contention(ph, 8) == 1.0 for ph in Phase)
    assert m.engine_contention(model, 8) is None


def test_a_missing_abstract_term_is_refused():
    class Incomplete(CostModel):
        """FAKE: lacks every term."""

    with pytest.raises(TypeError):
        Incomplete()


@pytest.mark.parametrize("mode", [Mode.COLOCATE, Mode.PARTIAL])
def test_a_minimal_cost_model_simulates_as_without_the_optional_terms(mode):
    plan, w = _plan(mode)
    tr = simulate(plan, w, Minimal(), 5, steps=2)
    assert tr.step_times() == pytest.approx(GOLDEN[mode], rel=1e-12)
    fake = simulate(plan, w, FakeCostModel(), 5, steps=2)   # the fake keeps the defaults too
    assert [(s.start_s, s.end_s) for s in fake.spans] == [(s.start_s, s.end_s) for s in tr.spans]


def test_a_delegating_model_forwards_every_term():
    terms = {n for n in vars(CostModel) if not n.startswith("_")}
    assert all(n in vars(DelegatingCostModel) for n in terms)
    plan, w = _plan(Mode.PARTIAL)
    a = simulate(plan, w, FakeCostModel(), 5, steps=2)
    b = simulate(plan, w, DelegatingCostModel(FakeCostModel()), 5, steps=2)
    assert a.step_times() == b.step_times()
