"""`yatt profile --quick` end to end on the tiny demo models, as a user re-profiles a host:
real Megatron/vLLM micro-benchmarks of the model tables at the quick set's points, the
host-wide Ray-path terms carried from the shipped profile rescaled by the tables both
measured, the trainer groups and engine calls measured, a profile that leaves no term of
the demo to the analytic model, and a profiled cost model
built from it that plans the demo. Slow (~1 min): marked `slow`."""
from __future__ import annotations

from pathlib import Path

import pytest

from yatt.cli.main import main
from yatt.core.config import load_experiment
from yatt.core.plan import Parallel
from yatt.core.roles import ReleasePolicy, Role

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo-cpu.yaml"
SHIPPED = ROOT / "configs" / "profiles" / "cpu-local.yaml"


@pytest.mark.slow
def test_quick_profile_of_the_demo(tmp_path, capsys):
    pytest.importorskip("vllm")
    pytest.importorskip("megatron.core")
    from yatt.planner.coverage import missing_terms
    from yatt.planner.profile_io import load_profile
    from yatt.planner.profiled import ProfiledCostModel, cost_model_for
    from yatt.planner.search import search
    from yatt.profiling.carry import measured_ratios
    from yatt.profiling.points import Points

    out = tmp_path / "p.yaml"
    assert main(["profile", str(DEMO), "--device", "cpu", "--quick", "-o", str(out),
                 "--no-progress"]) == 0
    prof = load_profile(out)
    t = prof.tables
    assert t is not None and t.device == "cpu"
    actor, genrm = t.models["tiny-actor"], t.models["tiny-genrm"]
    quick = Points.quick()
    assert [(b, s) for b, s, _ in actor.train] == [(float(b), float(s)) for b, s in quick.train]
    assert all(x > 0 for _, _, x in actor.train + actor.logprob)
    assert actor.engine.start_s > 0 and actor.engine.stop_s >= 0 and actor.weight_sync_s > 0
    # where the actor's responses end with EOS allowed (the demo budget is the cap)
    exp = load_experiment(DEMO)
    assert len(actor.stop_len) == quick.stop_samples
    assert actor.stop_cap == exp.workload.response_len.upper()
    assert all(0 <= n <= actor.stop_cap for n in actor.stop_len)
    assert genrm.engine is not None and len(genrm.engine.decode) == len(quick.decode)
    assert t.host_probe_s > 0 and t.host_probe_python_s > 0 and t.host_probe_matmul_s > 0
    # and the machine it measured on: the host check keeps it as measured here (own drift)
    from yatt.profiling.hostcheck import machine_id
    assert t.host_id == machine_id()
    # the host-wide Ray-path terms: the shipped profile's, times how much slower this host
    # ran the tables both profiles measured (interpreter-bound: round trip, sync)
    base = load_profile(SHIPPED)
    r = measured_ratios(base, t.models)
    assert r is not None and "Ray-path terms from" in prof.source
    b = base.tables
    assert t.rpc_s == pytest.approx(b.rpc_s * r.interpreter, abs=1e-6)
    assert [s for _, s in actor.sync] == pytest.approx(
        [s * r.interpreter for _, s in b.models["tiny-actor"].sync], abs=1e-6)
    assert t.contention == b.contention
    # each model's own Ray-path work is measured here: the trainer's TP and DP group steps
    # at the quick points (the demo's 2 devices: groups of 2) and every engine's calls
    assert "trainer groups and engine calls measured here" in prof.source
    for rows in (actor.train_tp, actor.train_dp):
        assert [tuple(x[:3]) for x in rows] == [(2.0, float(bb), float(ss)) for bb, ss in quick.tp_points]
        assert all(x[-1] > 0 for x in rows)
    for m in (actor, genrm):
        assert m.engine.call and all(n >= 1 and s > 0 for n, s in m.engine.call)
    assert missing_terms(prof, exp) == ()
    cost = cost_model_for(exp, prof)
    assert isinstance(cost, ProfiledCostModel)
    par = Parallel(1, 1, 1)
    # a re-create: timed at two KV cache sizes, the job's size (one cache block a sequence,
    # the smaller of the two) read off them, plus the (carried) round trip that asks for it
    small, big = genrm.engine.restart
    assert small[0] < big[0] and big[1:] == (genrm.engine.start_s, genrm.engine.stop_s)
    assert cost.engine_kv[Role.GENRM] == small[0]
    starts = (small[1], big[1])
    reload = cost.reload_time(exp.genrm, Role.GENRM, par, ReleasePolicy.TEARDOWN) - t.rpc_s
    assert min(starts) - 1e-6 <= reload <= max(starts) + 1e-6
    assert search(exp, cost, top=1).best.mean > 0
    cap = capsys.readouterr()
    assert "wrote" in cap.out and "Ray-path terms: from" in cap.err
    assert "every term measured" in cap.err
