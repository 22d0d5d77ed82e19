"""StreamCost: an optional cost-model extension that blocks a rollout engine for each
batch it hands to the GenRM queue (partial colocate). Colocate does not stream."""
from dataclasses import dataclass

from fakecost import FakeCostModel
from helpers import experiment, partial_pair, workload
from yatt.core import Mode, Phase
from yatt.sim import make_plan, simulate
from yatt.sim.simulate import StreamCost


@dataclass(frozen=True)
class HandoffCost(FakeCostModel):
    handoff_s: float = 0.5

    def stream_handoff_time(self, items: int) -> float:
        return self.handoff_s


def _rollout_busy(tr):
    return sum(s.duration for s in tr.spans if s.phase is Phase.ROLLOUT)


def test_handoff_slows_partial_rollout_only():
    free, slow = FakeCostModel(), HandoffCost()
    assert isinstance(slow, StreamCost) and not isinstance(free, StreamCost)
    a, b = partial_pair(free, slow)
    assert _rollout_busy(b) > _rollout_busy(a) + 0.5
    assert len(b.samples) == len(a.samples)
    w = workload(8, 4, resp=100)
    col = make_plan(experiment(w), Mode.COLOCATE)
    assert simulate(col, w, free, 3).step_times() == simulate(col, w, slow, 3).step_times()
