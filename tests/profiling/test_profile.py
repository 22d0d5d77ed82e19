"""`yatt profile --smoke` (the hidden test set) end to end on the tiny demo models: real
Megatron/vLLM micro-benchmarks (reduced point set), a loadable profile with tables, and a profiled
cost model built from it that plans the demo. Slow (~1 min): marked `slow`."""
from __future__ import annotations

from pathlib import Path

import pytest

from yatt.cli.main import main
from yatt.core.config import load_experiment
from yatt.core.plan import Parallel
from yatt.core.roles import ReleasePolicy, Role

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo-cpu.yaml"


@pytest.mark.slow
def test_quick_profile_of_the_demo(tmp_path, capsys):
    pytest.importorskip("vllm")
    pytest.importorskip("megatron.core")
    from yatt.planner.profile_io import load_profile
    from yatt.planner.profiled import ProfiledCostModel, cost_model_for
    from yatt.planner.search import search

    out = tmp_path / "p.yaml"
    assert main(["profile", str(DEMO), "--device", "cpu", "--smoke", "-o", str(out),
                 "--no-progress"]) == 0
    prof = load_profile(out)
    t = prof.tables
    assert t is not None and t.device == "cpu"
    actor, genrm = t.models["tiny-actor"], t.models["tiny-genrm"]
    assert len(actor.train) == 3 and all(x > 0 for _, _, x in actor.train)
    assert actor.engine.start_s > 0 and actor.engine.stop_s >= 0 and actor.weight_sync_s > 0
    # where the actor's responses end with EOS allowed (the demo budget is the cap)
    exp = load_experiment(DEMO)
    assert len(actor.stop_len) == 8 and actor.stop_cap == exp.workload.response_len.upper()
    assert all(0 <= n <= actor.stop_cap for n in actor.stop_len)
    assert genrm.engine is not None and len(genrm.engine.decode) == 3
    assert t.host_probe_s > 0       # the host's speed when profiled (bench/fidelity.py)
    # one join point per engine: 2 requests admitted into 4 decoding ones
    for m in (actor, genrm):
        assert [j[:3] for j in m.engine.join] == [(4.0, 2.0, 24.0)] and m.engine.join[0][3] >= 0
    cost = cost_model_for(exp, prof)
    assert isinstance(cost, ProfiledCostModel)
    par = Parallel(1, 1, 1)
    assert cost.reload_time(exp.genrm, Role.GENRM, par, ReleasePolicy.TEARDOWN) == pytest.approx(
        genrm.engine.start_s)
    assert search(exp, cost, top=1).best.mean > 0
    # the smoke set skips Ray and contention: the profile says so (the quick set does not)
    from yatt.planner.coverage import missing_terms

    lack = missing_terms(prof, exp)
    assert {"rpc_s", "contention", "tiny-actor: sync"} <= set(lack)
    cap = capsys.readouterr()
    assert "wrote" in cap.out and "not measured (priced by the analytic model): " in cap.err
