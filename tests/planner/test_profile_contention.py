"""The host-contention micro-benchmark really runs the executor's ops in parallel processes.

Slow (a local Ray session with two worker actors that each start vLLM and a Megatron
trainer: ~1-3 minutes).
It checks the mechanics and that every op was timed, not the ratios: those depend on the
box's load (see README "Sim-to-real fidelity")."""
from __future__ import annotations

from pathlib import Path

import pytest

from yatt.core.config import load_experiment

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_contention_benchmark_times_every_op_for_each_count():
    pytest.importorskip("vllm")
    pytest.importorskip("megatron.core")
    from yatt.exec import microbench as mb
    from yatt.exec import microbench_ray as mbr
    from yatt.planner.profile import measure_contention

    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    mb.prepare("cpu")
    ticks = []
    got = measure_contention(exp, "cpu", (2,), rounds=1, tick=ticks.append)
    assert len(got) == 1 and got[0].busy == 2
    c = got[0]
    assert all(getattr(c, k) > 0 for k in mbr.CONTENTION_OPS)
    assert ticks == ["contention: 1 device busy", "contention: 2 devices busy"]
    assert measure_contention(exp, "cpu", (), rounds=1) == ()


@pytest.mark.slow
def test_tp_group_train_times():
    """A real TP=2 Megatron group (two Ray actors, gloo) times every point."""
    pytest.importorskip("megatron.core")
    from yatt.exec import microbench as mb
    from yatt.exec import microbench_ray as mbr

    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    mb.prepare("cpu")
    got = mbr.group_train_times(exp.actor, mb.model_path(exp.actor), "cpu", 2, ((4, 16), (2, 32)),
                             reps=1, passes=1)
    assert len(got) == 2 and all(t > 0 for t in got)


@pytest.mark.slow
def test_stream_handoff_is_timed_on_a_real_engine_actor():
    """The executor's engine actor streaming to a Ray queue, against generating alone."""
    pytest.importorskip("vllm")
    from yatt.exec import microbench as mb
    from yatt.exec import microbench_ray as mbr

    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    mb.prepare("cpu")
    ticks = []
    s = mbr.handoff_time(mb.model_path(exp.actor), exp.actor.vocab, reps=2, requests=8,
                         tick=ticks.append)
    assert 0.0 <= s < 0.1 and ticks == ["stream hand-off"]
