"""How the engine takes newcomers while it decodes: at decode-step boundaries, as a real
engine's scheduler changes its batch only between steps; and a streamed GenRM takes the
hand-offs that piled up during a step as one call (the executor's `StreamQueue.get_all`).
The cost model is the labelled fake."""
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from fakecost import FakeCostModel
from helpers import GENRM_BIG
from yatt.sim.engine import GenEngine

FIRST_OUT = 20


def _run(arrivals, out, call_s=None, merged=False, charges=()):
    """Request 0 alone at t=0; request i (i >= 1) submitted at arrivals[i-1]; `charges`:
    (time, requests) hand-off charges. Returns each request's finish time."""
    env = simpy.Environment()
    n = 1 + len(arrivals)
    ends = {}

    def done(_e, finished, now):
        ends.update({i: now for i in finished})

    e = GenEngine(env, (0,), GENRM_BIG, 1, FakeCostModel(), 10 ** 6, 8, [16] * n, out,
                  [0.0] * n, done, call_s=call_s, merged_calls=merged)
    e.submit(0)

    def later():
        events = sorted([(t, "submit", i + 1) for i, t in enumerate(arrivals)]
                        + [(t, "charge", k) for t, k in charges])
        for t, what, x in events:
            yield env.timeout(t - env.now)
            if what == "submit":
                e.submit(x)
            else:
                e.charge(x)
        e.close()
    env.process(later())
    env.run()
    return [ends[i] for i in range(n)]


def _step_s() -> float:
    """The first request's mean decode step alone (the engine spaces boundaries by it)."""
    return FakeCostModel().decode_time(GENRM_BIG, 1, 1, 16, FIRST_OUT) / FIRST_OUT


@settings(max_examples=30, deadline=None)
@given(st.integers(1, FIRST_OUT - 2), st.floats(0.05, 0.95), st.floats(0.05, 0.95))
def test_a_newcomer_joins_at_the_next_step_boundary(k, u1, u2):
    """Arrivals anywhere inside the same decode step give the same run: the newcomer waits
    for that step's end, and the running request's steps are not cut."""
    per = _step_s()
    out = [FIRST_OUT, 5]
    a = _run([(k - 1 + u1) * per], out)
    b = _run([(k - 1 + u2) * per], out)
    assert a == pytest.approx(b, rel=1e-12)
    later = _run([(k + u1) * per], out)   # one step later: joins one boundary later
    assert later[1] > a[1]


def test_an_arrival_in_the_last_step_waits_for_the_interval_end():
    """Arriving during the running request's last step: it finishes first, undisturbed,
    then the newcomer runs alone."""
    per = _step_s()
    alone = _run([], [FIRST_OUT])[0]
    ends = _run([(FIRST_OUT - 0.5) * per], [FIRST_OUT, 3])
    assert ends[0] == pytest.approx(alone, rel=1e-12)
    assert ends[1] > ends[0]


@pytest.mark.parametrize("merged", [False, True])
def test_hand_offs_during_a_step_are_one_call_when_merged(merged):
    """Two hand-offs and a newcomer inside one decode step: billed apart the hand-offs cost
    two calls' fixed part, merged one; either way they are paid at that step's boundary,
    before the steps that follow. With call_s(k) = a + b k the run's end moves by exactly
    that."""
    a, b = 0.03, 0.002
    per = _step_s()
    out = [FIRST_OUT, 5]
    charges = [(2.2 * per, 3), (2.6 * per, 4)]
    base = max(_run([2.8 * per], out, call_s=lambda k: a + b * k, merged=merged,
                    charges=charges))
    free = max(_run([2.8 * per], out))
    calls = 1 if merged else 2
    assert base - free == pytest.approx(calls * a + b * 7, rel=1e-9)
