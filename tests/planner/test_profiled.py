"""ProfiledCostModel: table fits, contract invariants, CPU switch semantics, profile file
compatibility, the cost-model factory, and the CLI wiring (--profile)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from yatt.cli.main import main
from yatt.core.config import load_experiment
from yatt.core.costmodel import CostModel
from yatt.core.errors import InputError
from yatt.core.plan import Parallel
from yatt.core.roles import ReleasePolicy, Role
from yatt.core.specs import DistKind, LengthDist
from yatt.planner.costmodel import AnalyticCostModel
from yatt.planner.profile_io import (Contention, EngineTable, ModelTables, Profile,
                                     ProfileTables,
                                     load_profile, save_profile)
from yatt.planner.table_fits import train_features
from yatt.planner.profiled import (ProfiledCostModel, cost_model_for, experiment_for,
                                   shipped_profile)

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo-cpu.yaml"


def _decode(b, c):  # a known linear step law
    return 0.004 + 0.0001 * b + 2e-6 * b * c


def _tables(rpc: float = 0.0) -> ProfileTables:
    dec = tuple((float(b), float(c), _decode(b, c)) for b in (1, 8, 32) for c in (16, 64))
    pre = tuple((float(n), float(p), _decode(n, p) + 1e-5 * n * p) for n, p in ((1, 32), (8, 32), (16, 64)))
    # train: 0.05 s per step + 1e-4 s per padded token (one micro-batch each: budget 512)
    train = tuple((float(b), float(s), 0.05 + 1e-4 * b * s) for b, s in ((1, 16), (4, 32), (8, 32), (4, 64)))
    lp = tuple((float(b), float(s), 0.002 * b + 1e-5 * b * s) for b, s in ((1, 16), (8, 32), (4, 64)))
    eng = EngineTable(start_s=2.5, stop_s=1.5, decode=dec, prefill=pre)
    return ProfileTables(device="cpu", rpc_s=rpc, models={
        "tiny-actor": ModelTables(train=train, logprob=lp, engine=eng, weight_sync_s=0.03),
        "tiny-genrm": ModelTables(engine=EngineTable(start_s=3.0, stop_s=1.6, decode=dec, prefill=pre))})


@pytest.fixture(scope="module")
def exp():
    return load_experiment(DEMO)


@pytest.fixture(scope="module")
def cost(exp):
    return cost_model_for(exp, Profile(tables=_tables()))


def test_factory_and_contract(exp, cost):
    assert isinstance(cost, ProfiledCostModel) and isinstance(cost, CostModel)
    assert isinstance(cost_model_for(exp, None), AnalyticCostModel)
    assert isinstance(cost_model_for(exp, Profile()), AnalyticCostModel)  # no tables: analytic


def test_fits_recover_the_tables(exp, cost):
    a = exp.actor
    for b, c in ((1, 16), (8, 64), (20, 40)):
        assert cost.decode_step_time(a, 1, b, c) == pytest.approx(_decode(b, c), rel=1e-3)
    assert cost.prefill_time(a, 1, 100) == pytest.approx(1e-5 * 100, rel=0.05)
    assert cost.train_time(a, [32] * 6, Parallel(1, 1, 1)) == pytest.approx(0.05 + 1e-4 * 192, rel=0.02)
    assert cost.logprob_time(a, [32] * 5, Parallel(1, 1, 1)) == pytest.approx(0.01 + 1e-5 * 160, rel=0.02)


def test_decode_time_is_the_sum_of_steps(exp, cost):
    a = exp.actor
    total = cost.decode_time(a, 1, 7, 7 * 20.0, 13)
    steps = sum(cost.decode_step_time(a, 1, 7, 20.0 + i) for i in range(13))
    assert total == pytest.approx(steps, rel=1e-9)


def test_cpu_switches_engines_only(exp, cost):
    par, T = Parallel(1, 1, 1), ReleasePolicy.TEARDOWN
    assert cost.reload_time(exp.actor, Role.ROLLOUT, par, T) == pytest.approx(2.5)
    assert cost.offload_time(exp.genrm, Role.GENRM, par, T) == pytest.approx(1.6)
    for role in (Role.TRAINER, Role.REFERENCE):
        for rel in ReleasePolicy:
            assert cost.offload_time(exp.actor, role, par, rel) == 0.0
            assert cost.reload_time(exp.actor, role, par, rel) == 0.0
    assert cost.reload_time(exp.actor, Role.ROLLOUT, par, ReleasePolicy.RESIDENT) == 0.0
    assert cost.weight_sync_time(exp.actor, par, 1, 2, False) == pytest.approx(0.03)


def test_analytic_teardown_keeps_trainer_resident(exp):
    c = AnalyticCostModel.for_experiment(exp)
    par = Parallel(1, 1, 1)
    assert c.offload_time(exp.actor, Role.TRAINER, par, ReleasePolicy.TEARDOWN) == 0.0
    assert c.reload_time(exp.actor, Role.REFERENCE, par, ReleasePolicy.TEARDOWN) == 0.0
    assert c.reload_time(exp.actor, Role.ROLLOUT, par, ReleasePolicy.TEARDOWN) > 0.0


def test_unmeasured_model_falls_back_to_analytic(exp, cost):
    from yatt.core import catalog

    m = catalog.model("Qwen2.5-7B")
    ana = cost.analytic
    assert cost.decode_step_time(m, 1, 4, 100) == ana.decode_step_time(m, 1, 4, 100)
    assert cost.train_time(m, [64, 64], Parallel(1, 1, 1)) == ana.train_time(m, [64, 64], Parallel(1, 1, 1))


def test_simulate_with_profiled_model(exp, cost):
    from yatt.core.roles import Phase
    from yatt.planner.search import search

    res = search(exp, cost, top=2)
    tr = res.best.trace
    assert res.best.mean > 0
    # CPU: no trainer/reference offload or reload spans cost anything
    assert all(s.duration == 0 for s in tr.spans
               if s.role in (Role.TRAINER, Role.REFERENCE) and s.phase in (Phase.OFFLOAD, Phase.RELOAD))


def test_profile_tables_round_trip_and_old_files_load(tmp_path):
    t = _tables(rpc=0.001)
    m = dict(t.models)
    m["tiny-actor"] = dataclasses.replace(m["tiny-actor"], sync=((1.0, 0.04), (2.0, 0.05)),
                                          train_dp=((2.0, 8.0, 32.0, 0.2),))
    m["tiny-genrm"] = dataclasses.replace(m["tiny-genrm"], engine=dataclasses.replace(
        m["tiny-genrm"].engine, contention=((2.0, 1.13),)))
    p = Profile(hardware="x", tables=dataclasses.replace(t, models=m))
    save_profile(p, tmp_path / "p.yaml")
    assert load_profile(tmp_path / "p.yaml") == p
    (tmp_path / "old.yaml").write_text("kind: yatt.profile/1\nefficiency: {train_mfu: 0.3}\n")
    old = load_profile(tmp_path / "old.yaml")
    assert old.tables is None and old.efficiency.train_mfu == 0.3


@pytest.mark.parametrize("body,needle", [
    ("tables: {device: tpu}", "device"),
    ("tables: {models: {m: {train: [[1, 16, -1.0]]}}}", "train[0]"),
    ("tables: {models: {m: {engine: {start_s: 1}}}}", "stop_s"),
    ("tables: {models: {m: {stop_len: [3, 90], stop_cap: 64}}}", "stop_len[1]"),
    ("tables: {models: {m: {stop_len: [3]}}}", "stop_len[0]"),
    ("tables: {models: {m: {train_tp: [[1, 8, 32, 0.1]]}}}", "train_tp[0]"),
    ("tables: {models: {m: {train_dp: [[2, 8, 32]]}}}", "train_dp[0]"),
    ("tables: {models: {m: {sync: [[0, 0.04]]}}}", "sync[0]"),
    ("tables: {models: {m: {engine: {start_s: 1, stop_s: 1, contention: [[1, 1.2]]}}}}",
     "contention[0]"),
    ("tables: {models: {m: {engine: {start_s: 1, stop_s: 1, call: [[8, -0.01]]}}}}", "call[0]"),
    ("tables: {models: {m: {engine: {start_s: 1, stop_s: 1, join: [[4, 0, 24, 0.001]]}}}}",
     "join[0]"),
    ("tables: {models: {m: {engine: {start_s: 1, stop_s: 1, restart: [[1e6, -0.1, 0.5], "
     "[2e6, 1, 1]]}}}}", "restart[0]"),
    ("tables: {models: {m: {engine: {start_s: 1, stop_s: 1, restart: [[1e6, 1, 0.5], "
     "[1e6, 1.1, 0.6]]}}}}", "restart"),
])
def test_bad_tables_exit_2_and_write_nothing(tmp_path, capsys, body, needle):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: yatt.profile/1\n" + body + "\n")
    out = tmp_path / "out"
    assert main(["plan", str(DEMO), "--profile", str(bad), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]
    assert not out.exists()


def test_plan_with_profile_uses_tables(tmp_path, capsys):
    prof = tmp_path / "p.yaml"
    save_profile(Profile(tables=_tables()), prof)
    assert main(["plan", str(DEMO), "--profile", str(prof), "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 0
    assert (tmp_path / "o" / "plan.yaml").is_file()


def test_shipped_cpu_profile_has_the_demo_models():
    found = shipped_profile("cpu-local")
    assert found is not None, "configs/profiles/cpu-local.yaml is shipped"
    prof, _ = found
    assert {"tiny-actor", "tiny-genrm"} <= set(prof.tables.models)
    assert shipped_profile("H100-SXM") is None


def test_profile_cli_refuses_bad_input(tmp_path, capsys):
    assert main(["profile", str(DEMO), "--device", "tpu", "-o", str(tmp_path / "p.yaml")]) == 2
    assert "--device" in capsys.readouterr().err
    assert main(["profile", str(DEMO), "-o", str(tmp_path / "nope" / "p.yaml")]) == 2
    assert not (tmp_path / "p.yaml").exists()


def test_contention_from_the_tables(exp):
    from dataclasses import replace

    from yatt.core.roles import Phase
    from yatt.planner.profile_io import Contention
    none = cost_model_for(exp, Profile(tables=_tables()))
    assert all(none.contention(ph, 4) == 1.0 for ph in Phase)   # nothing measured: none
    t = replace(_tables(), contention=(Contention(busy=4, reload=2.0, decode=1.6),
                                       Contention(busy=2, reload=1.4, offload=1.1, train=1.3)))
    c = cost_model_for(exp, Profile(tables=t))
    assert c.contention(Phase.RELOAD, 1) == 1.0
    assert c.contention(Phase.RELOAD, 2) == pytest.approx(1.4)
    assert c.contention(Phase.RELOAD, 3) == pytest.approx(1.7)      # linear between counts
    assert c.contention(Phase.RELOAD, 16) == pytest.approx(2.0)     # flat beyond the largest
    assert c.contention(Phase.GENRM, 2) == 1.0 and c.contention(Phase.ROLLOUT, 4) == pytest.approx(1.6)
    assert c.contention(Phase.TRAIN, 2) == pytest.approx(1.3)
    assert c.contention(Phase.WEIGHT_SYNC, 2) == 1.0               # not measured
    # with contention, a 2-device colocate plan predicts slower switches than without
    from yatt.core.layout import make_plan
    from yatt.core.roles import Mode
    from yatt.sim import simulate
    plan = make_plan(exp, Mode.COLOCATE)
    a, b = simulate(plan, exp.workload, none, 0), simulate(plan, exp.workload, c, 0)
    rel = lambda tr: sum(s.duration for s in tr.spans if s.phase is Phase.RELOAD)
    assert rel(b) == pytest.approx(1.4 * rel(a), rel=1e-9) and rel(a) > 0


def test_contention_round_trip_and_bad_entries(tmp_path):
    from dataclasses import replace

    from yatt.planner.profile_io import Contention

    p = Profile(tables=replace(_tables(), contention=(Contention(busy=2, reload=1.3),),
                               contention_load_avg=1.5))
    save_profile(p, tmp_path / "p.yaml")
    assert load_profile(tmp_path / "p.yaml") == p
    for body, needle in (("contention: [{busy: 1}]", "busy"),
                         ("contention: [{busy: 2}, {busy: 2}]", "contention[1].busy"),
                         ("contention: [{busy: 2, reload: 0}]", "reload")):
        (tmp_path / "b.yaml").write_text(f"kind: yatt.profile/1\ntables: {{{body}}}\n")
        with pytest.raises(InputError) as e:
            load_profile(tmp_path / "b.yaml")
        assert needle in str(e.value)


def test_contention_counts_to_measure():
    from yatt.profiling.points import Points

    exps = [load_experiment(DEMO)]
    assert Points().busy_counts(exps, "cpu") == tuple(range(2, exps[0].cluster.num_gpus + 1))
    assert Points().busy_counts(exps, "cuda") == ()
    assert Points.smoke().busy_counts(exps, "cpu") == ()
    assert Points(contention=(3, 2, 1)).busy_counts(exps, "cpu") == (2, 3)


def test_group_and_sync_counts_to_measure():
    """DP groups: what a TP=1 trainer gets on the experiments' clusters (none in the smoke
    set); weight sync: 1 .. the cluster's engines."""
    from yatt.profiling.points import Points
    from yatt.profiling.ray_tables import sync_counts

    exps = [load_experiment(DEMO)]
    n = exps[0].cluster.num_gpus
    assert n >= 2
    assert Points().dp_sizes(exps, exps[0].actor.name)[-1] == min(n, 4)
    assert Points().dp_sizes(exps, "another-model") == ()
    assert Points.smoke().dp_sizes(exps, exps[0].actor.name) == ()
    assert sync_counts(exps, exps[0].actor.name) == tuple(range(1, min(n, 4) + 1))


def test_weight_sync_adds_the_object_store_transfer(exp):
    from dataclasses import replace

    base = cost_model_for(exp, Profile(tables=_tables(rpc=0.001)))
    par = Parallel(1, 1, 1)
    nbytes = exp.actor.params * exp.actor.dtype_bytes
    t0 = base.weight_sync_time(exp.actor, par, 1, 1, False)
    assert t0 == pytest.approx(0.03 + 2 * 0.001) and base.transfer_time(nbytes) == 0.0
    # 10 ms + 5 ms per MB, measured at 1 and 4 MB: linear in bytes
    t = replace(_tables(rpc=0.001), transfer=((1e6, 0.015), (4e6, 0.030)))
    c = cost_model_for(exp, Profile(tables=t))
    assert c.transfer_time(2e6) == pytest.approx(0.020)
    assert c.weight_sync_time(exp.actor, par, 1, 1, False) == pytest.approx(
        t0 + 0.010 + 0.005 * nbytes / 1e6)
    one = cost_model_for(exp, Profile(tables=replace(t, transfer=((2e6, 0.02),))))
    assert one.transfer_time(1e6) == pytest.approx(0.01)  # one point: proportional
    with pytest.raises(InputError) as e:
        replace(t, transfer=((0.0, 0.01),))
    assert "transfer[0]" in str(e.value)


def _with_stops(stops, cap):
    t = _tables()
    m = dict(t.models)
    m["tiny-actor"] = dataclasses.replace(m["tiny-actor"], stop_len=tuple(stops), stop_cap=cap)
    return Profile(tables=dataclasses.replace(t, models=m))


def test_experiment_for_uses_the_measured_stop_lengths(exp):
    prof = _with_stops([2, 3, 3, 5, 64], 64)
    got = experiment_for(exp, prof).workload.stop_len
    assert got is not None and got.kind is DistKind.EMPIRICAL and got.values == (2, 3, 3, 5, 64)
    assert got.max == 64
    # an explicit stop_len in the config wins; no measurement leaves the experiment alone
    mine = LengthDist(DistKind.CONST, 7)
    explicit = dataclasses.replace(exp, workload=dataclasses.replace(exp.workload, stop_len=mine))
    assert experiment_for(explicit, prof).workload.stop_len == mine
    assert experiment_for(exp, Profile(tables=_tables())) is exp
    assert experiment_for(exp, None) is exp


def test_measured_stop_lengths_shorten_the_predicted_step(exp, cost):
    """Responses that end at EOS long before their budget make a shorter predicted step:
    the simulated lengths are min(budget, stop)."""
    from yatt.planner.search import search
    from yatt.sim.simulate import simulate

    budgeted = dataclasses.replace(exp, workload=dataclasses.replace(
        exp.workload, response_len=LengthDist(DistKind.CONST, 64)))
    short = experiment_for(budgeted, _with_stops([2, 3, 4], 64))
    plan = search(budgeted, cost, top=1).best.plan
    full = simulate(plan, budgeted.workload, cost, seed=0, steps=2)
    cut = simulate(plan, short.workload, cost, seed=0, steps=2)
    assert {s.response_tokens for s in full.samples} == {64}
    assert {s.response_tokens for s in cut.samples} <= {2, 3, 4}
    assert max(cut.step_times().values()) < min(full.step_times().values())


def test_stop_lengths_round_trip_in_profile_files(tmp_path):
    p = _with_stops([1, 9, 64], 64)
    save_profile(p, tmp_path / "p.yaml")
    assert load_profile(tmp_path / "p.yaml") == p


def test_measured_tp_scaling_replaces_the_analytic_one(exp):
    """A profile that timed a TP=2 group prices TP=2 training from that measurement (here:
    2x the TP=1 step, as gloo on one host can make it) instead of the analytic roofline,
    which expects TP=2 to be faster."""
    base = cost_model_for(exp, Profile(tables=_tables()))
    lens = [48] * 8
    one = base.train_time(exp.actor, lens, Parallel(1, 1, 1))
    assert base.train_time(exp.actor, lens, Parallel(2, 1, 1)) < one   # analytic: faster
    fit = base._fit(exp.actor)
    meas = tuple((2.0, float(b), float(s), 2.0 * float(
        np.array(train_features([s] * b, fit.mbt)) @ fit.train)) for b, s in ((8, 32), (4, 64)))
    t = _tables()
    m = dict(t.models)
    m["tiny-actor"] = dataclasses.replace(m["tiny-actor"], train_tp=meas)
    cost = cost_model_for(exp, Profile(tables=dataclasses.replace(t, models=m)))
    rpc = cost.tables.rpc_s * 4
    two = cost.train_time(exp.actor, lens, Parallel(2, 1, 1))
    assert (two - rpc) == pytest.approx(2.0 * (one - rpc), rel=1e-6)
    # a TP size the profile did not time keeps the analytic ratio
    assert cost.train_time(exp.actor, lens, Parallel(4, 1, 1)) == pytest.approx(
        base.train_time(exp.actor, lens, Parallel(4, 1, 1)))


def _with_join(join) -> ProfileTables:
    t = _tables()
    m = dict(t.models)
    m["tiny-genrm"] = dataclasses.replace(
        m["tiny-genrm"], engine=dataclasses.replace(m["tiny-genrm"].engine, join=join))
    return dataclasses.replace(t, models=m)


def test_join_table_prices_requests_that_join_a_decoding_batch(exp, tmp_path):
    # 1 ms per joining request plus 20 us per prompt token: recovered by the fit
    join = tuple((float(r), float(k), float(p), k * (1e-3 + 2e-5 * p))
                 for r, k, p in ((4, 1, 24), (4, 4, 24), (16, 8, 24), (8, 2, 64), (8, 8, 64)))
    cost = cost_model_for(exp, Profile(tables=_with_join(join)))
    g = exp.genrm
    for p in (24, 40, 64):
        assert cost.prefill_join_time(g, 1, p) == pytest.approx(1e-3 + 2e-5 * p, rel=0.02)
    # no join table (the actor here): a joining request costs the idle-engine prefill
    assert cost.prefill_join_time(exp.actor, 1, 40) == cost.prefill_time(exp.actor, 1, 40)
    assert cost.prefill_join_time(g, 1, 0) == 0.0
    prof = Profile(tables=_with_join(join))
    save_profile(prof, tmp_path / "p.yaml")
    assert load_profile(tmp_path / "p.yaml") == prof


def test_measured_handoff_slows_the_streaming_rollout(exp):
    from yatt.core import Mode, Phase
    from yatt.sim import make_plan, simulate
    free = cost_model_for(exp, Profile(tables=_tables()))
    slow = cost_model_for(exp, Profile(tables=dataclasses.replace(_tables(), handoff_s=0.05)))
    assert slow.stream_handoff_time(3) == 0.05
    assert free.stream_handoff_time(3) == 0.0
    plan = make_plan(exp, Mode.PARTIAL, rollout_devices=1)

    def rollout(cost):
        return sum(s.duration for s in simulate(plan, exp.workload, cost, 0).spans
                   if s.phase is Phase.ROLLOUT)
    assert rollout(slow) > rollout(free) + 0.05


def _with_actor(**kw) -> ProfileTables:
    t = _tables()
    m = dict(t.models)
    m["tiny-actor"] = dataclasses.replace(m["tiny-actor"], **kw)
    return dataclasses.replace(t, models=m)


def test_reference_pays_for_its_padding(exp, cost):
    """The reference worker right-pads consecutive sequences into one forward: one long
    response makes the whole group as wide as itself (the longtail workload's case)."""
    a, one = exp.actor, Parallel(1, 1, 1)
    mixed = cost.logprob_time(a, [16] * 7 + [128], one)
    assert mixed == pytest.approx(cost.logprob_time(a, [128] * 8, one), rel=1e-9)
    # the fit's 1e-5 s per token on 8 x 128 padded tokens against 8 x 16
    assert mixed - cost.logprob_time(a, [16] * 8, one) == pytest.approx(1e-5 * 8 * 112, rel=0.05)
    # past the group budget (REF_BATCH_TOKENS padded tokens) a new, narrower group starts
    from yatt.core.balance import REF_BATCH_TOKENS
    n = REF_BATCH_TOKENS // 1024
    split = cost.logprob_time(a, [1024] * n + [16] * 8, one)
    assert split < cost.logprob_time(a, [1024] * (n + 8), one)


def test_measured_dp_group_replaces_the_analytic_all_reduce(exp, cost):
    """A profile that timed a DP=2 group (its ranks' gradient all-reduce, metric reductions
    and waits included) prices DP=2 training from it and adds no analytic all-reduce."""
    lens, one, two = [48] * 8, Parallel(1, 1, 1), Parallel(1, 1, 2)
    assert cost.grad_sync_time(exp.actor, two) > 0.0          # no DP table: analytic
    fit = cost._fit(exp.actor)
    meas = tuple((2.0, float(b), float(s), 1.5 * float(
        np.array(train_features([s] * b, fit.mbt)) @ fit.train)) for b, s in ((8, 32), (4, 64)))
    dp = cost_model_for(exp, Profile(tables=_with_actor(train_dp=meas)))
    assert dp.train_time(exp.actor, lens, two) == pytest.approx(
        1.5 * cost.train_time(exp.actor, lens, one), rel=1e-6)
    assert dp.grad_sync_time(exp.actor, two) == 0.0
    assert dp.train_time(exp.actor, lens, one) == pytest.approx(
        cost.train_time(exp.actor, lens, one))
    # a DP size the profile did not time keeps the analytic all-reduce
    assert dp.grad_sync_time(exp.actor, Parallel(1, 1, 4)) == cost.grad_sync_time(
        exp.actor, Parallel(1, 1, 4))


def test_measured_sync_table_prices_weight_sync_by_engine_count(exp, cost):
    par = Parallel(1, 1, 1)
    c = cost_model_for(exp, Profile(tables=_with_actor(sync=((1.0, 0.04), (2.0, 0.05)))))
    assert c.weight_sync_time(exp.actor, par, 1, 1, False) == pytest.approx(0.04)
    assert c.weight_sync_time(exp.actor, par, 1, 2, False) == pytest.approx(0.05)
    assert c.weight_sync_time(exp.actor, par, 1, 4, False) == pytest.approx(0.07)  # the last slope
    # what the table did not measure (engines across nodes, TP engines): the composed estimate
    assert c.weight_sync_time(exp.actor, par, 1, 2, True) == cost.weight_sync_time(
        exp.actor, par, 1, 2, True)
    assert c.weight_sync_time(exp.actor, par, 2, 1, False) == cost.weight_sync_time(
        exp.actor, par, 2, 1, False)


def test_a_genrm_with_its_own_contention_uses_it(exp, cost):
    from yatt.core.roles import Phase
    from yatt.sim.contention import SlowedEngineCost, engine_cost

    t = _tables()
    m = dict(t.models)
    g = m["tiny-genrm"]
    m["tiny-genrm"] = dataclasses.replace(g, engine=dataclasses.replace(
        g.engine, contention=((2.0, 1.2), (4.0, 1.5))))
    shared = (Contention(busy=2, reload=1.0, offload=1.0, decode=1.05, logprob=1.0, train=1.0),)
    c = cost_model_for(exp, Profile(tables=dataclasses.replace(t, models=m, contention=shared)))
    assert c.engine_contention(exp.genrm, 2) == pytest.approx(1.2)
    assert c.engine_contention(exp.genrm, 3) == pytest.approx(1.35)
    assert c.engine_contention(exp.genrm, 1) == 1.0
    assert c.engine_contention(exp.actor, 2) is None       # not measured: the shared ratio
    ge, ae = engine_cost(c, Phase.GENRM, 2, exp.genrm), engine_cost(c, Phase.ROLLOUT, 2, exp.actor)
    assert isinstance(ge, SlowedEngineCost) and ge.factor == pytest.approx(1.2)
    assert isinstance(ae, SlowedEngineCost) and ae.factor == pytest.approx(1.05)
    assert engine_cost(c, Phase.GENRM, 1, exp.genrm) is c


def test_engine_call_overhead_is_fitted_from_the_call_table(exp, cost):
    """c0 + c1 * requests through the measured (requests, s) points; nothing without them."""
    t = _tables()
    m = dict(t.models)
    g = m["tiny-genrm"]
    pts = tuple((float(n), 0.007 + 0.0004 * n) for n in (2, 8, 32))
    m["tiny-genrm"] = dataclasses.replace(g, engine=dataclasses.replace(g.engine, call=pts))
    c = cost_model_for(exp, Profile(tables=dataclasses.replace(t, models=m)))
    assert c.engine_call_time(exp.genrm, 16) == pytest.approx(0.007 + 0.0004 * 16, rel=1e-6)
    assert c.engine_call_time(exp.genrm, 0) == 0.0
    assert c.engine_call_time(exp.actor, 16) == 0.0      # the actor's engine has no call table
    assert cost.engine_call_time(exp.genrm, 16) == 0.0


def test_judge_budget_is_the_clamped_mean_output():
    from yatt.core.specs import DistKind, LengthDist

    w = load_experiment(DEMO).workload
    for mean, want in ((1, 4), (16, 16), (500, 64)):
        ww = dataclasses.replace(w, genrm_output_len=LengthDist(DistKind.CONST, mean))
        assert ww.judge_max_tokens == want


MIB = 1 << 20


def _with_restart(rows) -> ProfileTables:
    t = _tables()
    g = t.models["tiny-genrm"]
    return dataclasses.replace(t, models={**t.models, "tiny-genrm": dataclasses.replace(
        g, engine=dataclasses.replace(g.engine, restart=rows))})


def test_engine_restart_is_priced_at_the_jobs_kv_cache_size(exp, tmp_path):
    """A CPU engine's re-create and teardown grow with the KV cache the executor allocates:
    the `restart` rows give a line in cache bytes, read at the job's size."""
    from yatt.core.kvcache import job_kv_bytes

    rows = ((100.0 * MIB, 1.0, 0.5), (900.0 * MIB, 2.0, 0.9))
    t = _with_restart(rows)
    save_profile(Profile(tables=t), tmp_path / "p.yaml")
    assert load_profile(tmp_path / "p.yaml").tables == t
    par, T, g = Parallel(1, 1, 1), ReleasePolicy.TEARDOWN, exp.genrm
    at = ProfiledCostModel(AnalyticCostModel.for_experiment(exp), t, {Role.GENRM: 500 * MIB})
    assert at.reload_time(g, Role.GENRM, par, T) == pytest.approx(1.5, rel=1e-6)
    assert at.offload_time(g, Role.GENRM, par, T) == pytest.approx(0.7, rel=1e-6)
    # the size unknown (no experiment): the measured start_s / stop_s
    blind = ProfiledCostModel(AnalyticCostModel.for_experiment(exp), t)
    assert blind.reload_time(g, Role.GENRM, par, T) == pytest.approx(3.0)
    # from an experiment: its own cache size, and a larger batch limit costs more
    cost = cost_model_for(exp, Profile(tables=t))
    kv = job_kv_bytes(exp)[1]
    assert cost.engine_kv[Role.GENRM] == kv
    assert cost.reload_time(g, Role.GENRM, par, T) == pytest.approx(
        1.0 + (kv - 100 * MIB) / (800 * MIB), rel=1e-6)
    big = dataclasses.replace(exp, engine=dataclasses.replace(
        exp.engine, genrm_max_num_seqs=4 * exp.engine.genrm_max_num_seqs))
    assert (cost_model_for(big, Profile(tables=t)).reload_time(g, Role.GENRM, par, T)
            > cost.reload_time(g, Role.GENRM, par, T))


def test_engine_restart_never_shrinks_with_a_larger_cache(exp):
    """A measured slope below 0 (noise) fits as flat: no size makes a re-create cheaper."""
    t = _with_restart(((100.0 * MIB, 1.2, 0.6), (900.0 * MIB, 1.0, 0.5)))
    par, T = Parallel(1, 1, 1), ReleasePolicy.TEARDOWN
    times = [ProfiledCostModel(AnalyticCostModel.for_experiment(exp), t, {Role.GENRM: k * MIB})
             .reload_time(exp.genrm, Role.GENRM, par, T) for k in (10, 500, 5000)]
    assert times[0] == pytest.approx(times[1]) == pytest.approx(times[2])
    assert 1.0 <= times[0] <= 1.2


def test_a_model_of_a_measured_shape_takes_its_timing_tables_not_its_stop_lengths(exp):
    """A renamed model of the measured shape (the user's own weights, say) is priced by the
    measured tables, exactly as the measured one; its stop lengths are not borrowed (they
    follow the weights); another shape keeps the analytic model."""
    from yatt.planner.coverage import missing_terms

    a = exp.actor
    t = _tables()
    measured = dataclasses.replace(t.models["tiny-actor"], shape=a.shape_key, stop_len=(3, 5, 9),
                                   stop_cap=16)
    prof = Profile(tables=dataclasses.replace(t, models={**t.models, "tiny-actor": measured}))
    mine = dataclasses.replace(a, name="my-actor", hf_path="elsewhere")
    wider = dataclasses.replace(a, name="my-wide-actor", hidden=a.hidden * 2)
    assert mine.shape_key == a.shape_key and wider.shape_key != a.shape_key
    own, renamed, other = (cost_model_for(dataclasses.replace(exp, actor=m), prof)
                           for m in (a, mine, wider))
    lens, par = [32] * 6, Parallel(1, 1, 1)
    assert renamed.train_time(mine, lens, par) == own.train_time(a, lens, par)
    assert renamed.logprob_time(mine, lens, par) == own.logprob_time(a, lens, par)
    assert renamed.decode_time(mine, 1, 7, 140.0, 13) == own.decode_time(a, 1, 7, 140.0, 13)
    ana = AnalyticCostModel.for_experiment(dataclasses.replace(exp, actor=wider), prof.efficiency)
    assert other.train_time(wider, lens, par) == ana.train_time(wider, lens, par)
    # stop lengths: the measured model's own only
    assert experiment_for(exp, prof).workload.stop_len.values == (3, 5, 9)
    assert experiment_for(dataclasses.replace(exp, actor=mine), prof).workload.stop_len is None
    gaps = set(missing_terms(prof, dataclasses.replace(exp, actor=mine)))
    assert "my-actor: stop_len" in gaps and "my-actor: every table" not in gaps
    assert "my-wide-actor: every table" in missing_terms(prof, dataclasses.replace(exp, actor=wider))


def test_shape_survives_a_profile_round_trip(tmp_path):
    t = _tables()
    m = dataclasses.replace(t.models["tiny-actor"], shape="layers=2 hidden=128")
    prof = Profile(tables=dataclasses.replace(t, models={**t.models, "tiny-actor": m}))
    save_profile(prof, tmp_path / "p.yaml")
    assert load_profile(tmp_path / "p.yaml").tables.models["tiny-actor"].shape == "layers=2 hidden=128"


def test_the_shipped_profile_records_each_models_shape(exp):
    """The shipped CPU profile's entries carry the shapes of the configs that measured them,
    so the demo-learn models (the same shapes, trained weights) take measured tables."""
    prof, _ = shipped_profile("cpu-local")
    assert all(m.shape for m in prof.tables.models.values())
    learn = load_experiment(ROOT / "configs" / "demo-learn.yaml")
    assert prof.tables.timing_for(learn.actor)[0] == "tiny-actor"
    assert prof.tables.timing_for(learn.genrm) is not None
    assert prof.tables.models["tiny-actor"].shape == exp.actor.shape_key


def test_a_genrm_of_a_measured_shape_takes_its_engine_contention(exp):
    """The GenRM's own engine contention follows the shape too, even when another entry of
    that shape (an actor's, with more tables) prices its engine steps."""
    from yatt.planner.coverage import missing_terms

    t = _tables()
    g = exp.genrm
    judge = dataclasses.replace(t.models["tiny-genrm"], shape=g.shape_key, engine=dataclasses.replace(
        t.models["tiny-genrm"].engine, contention=((2.0, 1.3),)))
    actor_like = dataclasses.replace(t.models["tiny-actor"], shape=g.shape_key)
    prof = Profile(tables=dataclasses.replace(t, models={"tiny-actor": t.models["tiny-actor"],
                                                         "big-actor": actor_like,
                                                         "tiny-genrm": judge}))
    mine = dataclasses.replace(g, name="my-judge")
    e = dataclasses.replace(exp, genrm=mine)
    cost = cost_model_for(e, prof)
    assert prof.tables.timing_for(mine)[0] == "big-actor"       # the entry with most tables
    assert cost.engine_contention(mine, 2) == pytest.approx(1.3)
    assert "my-judge: engine.contention" not in missing_terms(prof, e)
    alone = Profile(tables=dataclasses.replace(t, models={"tiny-actor": t.models["tiny-actor"],
                                                          "big-actor": actor_like}))
    assert cost_model_for(e, alone).engine_contention(mine, 2) is None
    assert "my-judge: engine.contention" in missing_terms(alone, e)
