"""The host-contention micro-benchmark really runs the executor's ops in parallel processes.

Slow (a local Ray session with two worker actors that each start vLLM and a Megatron
trainer: ~1-3 minutes).
It checks the mechanics and that every op was timed (a finite, non-negative number of
seconds), not how fast: speeds and ratios depend on the box's load (docs/fidelity.md) and
are measured by bench/, never asserted here."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from yatt.core.config import load_experiment

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_contention_benchmark_times_every_op_for_each_count():
    pytest.importorskip("vllm")
    pytest.importorskip("megatron.core")
    from yatt.profiling import microbench as mb
    from yatt.profiling import microbench_ray as mbr
    from yatt.profiling.ray_tables import measure_contention

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
    from yatt.profiling import microbench as mb
    from yatt.profiling import microbench_ray as mbr

    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    mb.prepare("cpu")
    got = mbr.group_train_times(exp.actor, mb.model_path(exp.actor), "cpu", 2, ((4, 16), (2, 32)),
                             reps=1, passes=1)
    assert len(got) == 2 and all(t > 0 for t in got)


@pytest.mark.slow
def test_dp_group_train_times():
    """A real DP=2 Megatron group (two Ray actors, gloo all-reduce) times every point."""
    pytest.importorskip("megatron.core")
    from yatt.profiling import microbench as mb
    from yatt.profiling import microbench_ray as mbr

    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    mb.prepare("cpu")
    got = mbr.group_train_times(exp.actor, mb.model_path(exp.actor), "cpu", 1, ((4, 16),),
                                reps=1, passes=1, dp=2)
    assert len(got) == 1 and got[0] > 0


@pytest.mark.slow
def test_weight_sync_and_genrm_contention_run_on_real_engine_actors():
    """Weight sync on the executor's path (a trainer actor's state dict to 1 and 2 vLLM
    engine actors), and a GenRM's own engine contention (2 engines at once over 1)."""
    pytest.importorskip("vllm")
    from yatt.profiling import microbench as mb
    from yatt.profiling import microbench_engines as mbe
    from yatt.profiling.ray_tables import engine_contention

    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    ticks = []
    got = mbe.sync_times(exp.actor, mb.model_path(exp.actor), "cpu", (2, 1), reps=1,
                         max_num_seqs=8, mem_util=0.5, tick=ticks.append)
    assert len(got) == 2 and all(0 < t < math.inf for t in got)
    with pytest.raises(ValueError, match="engine counts"):
        mbe.sync_times(exp.actor, mb.model_path(exp.actor), "cpu", (0,), 1, 8, 0.5)
    ec = engine_contention(exp, "cpu", (2,), rounds=1, tick=ticks.append)
    assert len(ec) == 1 and ec[0][0] == 2.0 and ec[0][1] > 0
    assert engine_contention(exp, "cpu", (), rounds=1) == ()
    assert ticks == ["weight sync through Ray", f"{exp.genrm.name}: engine contention"]


@pytest.mark.slow
def test_call_overhead_is_timed_on_the_executors_engine_actors():
    """GenRMServer.judge and EngineServer.generate through Ray, against the same requests'
    bare engine steps."""
    pytest.importorskip("vllm")
    from yatt.profiling import microbench as mb
    from yatt.profiling import microbench_engines as mbe

    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    ticks = []
    got = mbe.call_overhead_times(exp.genrm, mb.model_path(exp.genrm), "cpu", reps=1,
                                  max_num_seqs=16, sizes=(2, 8), tick=ticks.append,
                                  judge=mbe.JudgeSetup(mb.model_path(exp.actor),
                                                       exp.actor.vocab, 4))
    assert [n for n, _ in got] == [2, 8] and all(0 <= t < math.inf for _, t in got)
    # the rollout engine's own call (EngineServer.generate), seeded requests
    roll = mbe.call_overhead_times(exp.actor, mb.model_path(exp.actor), "cpu", reps=1,
                                   max_num_seqs=16, sizes=(4,), tick=ticks.append)
    assert [n for n, _ in roll] == [4] and 0 <= roll[0][1] < math.inf
    assert ticks == [f"{exp.genrm.name}: engine call overhead",
                     f"{exp.actor.name}: engine call overhead"]


@pytest.mark.slow
def test_stream_handoff_is_timed_on_a_real_engine_actor():
    """The executor's engine actor streaming to a Ray queue, against generating alone."""
    pytest.importorskip("vllm")
    from yatt.profiling import microbench as mb
    from yatt.profiling import microbench_engines as mbe

    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    mb.prepare("cpu")
    ticks = []
    s = mbe.handoff_time(mb.model_path(exp.actor), exp.actor.vocab, reps=2, requests=8,
                         tick=ticks.append)
    assert 0.0 <= s < math.inf and ticks == ["stream hand-off"]
