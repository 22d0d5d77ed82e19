"""CostModel.stream_handoff_time: the optional term that blocks a rollout engine for each
batch it hands to the GenRM queue (partial colocate). Colocate does not stream."""
from dataclasses import dataclass

import pytest

from fakecost import FakeCostModel
from helpers import experiment, extension_pair, phase_busy, workload
from yatt.core import Mode, Phase
from yatt.sim import make_plan, simulate


@dataclass(frozen=True)
class HandoffCost(FakeCostModel):
    """FAKE: each streamed hand-off blocks the rollout engine for `handoff_s`."""

    handoff_s: float = 0.5

    def stream_handoff_time(self, items: int) -> float:
        return self.handoff_s


def test_handoff_slows_partial_rollout_only():
    """Each engine step that finishes requests hands them to the GenRM queue once; the queue
    has room throughout, so every hand-off blocks its engine for exactly `handoff_s`, inside
    the engine's busy time."""
    free, slow = FakeCostModel(), HandoffCost()
    a, b = extension_pair(free, slow, "stream_handoff_time")
    # hand-offs = distinct finishing instants (the 32 samples' lengths all differ here)
    handoffs = len({s.rollout_end_s for s in b.samples})
    assert handoffs == len(b.samples) == 32
    grown = phase_busy(b, Phase.ROLLOUT) - phase_busy(a, Phase.ROLLOUT)
    assert grown == pytest.approx(slow.handoff_s * handoffs, rel=1e-9)
    w = workload(8, 4, resp=100)
    col = make_plan(experiment(w), Mode.COLOCATE)
    assert simulate(col, w, free, 3).step_times() == simulate(col, w, slow, 3).step_times()
