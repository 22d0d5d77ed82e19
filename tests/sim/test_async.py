"""Async mode in the simulator: the staleness bound, the queue bound, every sample
generated, judged and trained once, warm-up apart from the steady state."""
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fakecost import FakeCostModel
from helpers import GENRM_TINY, experiment, workload
from yatt.core import AlgoSpec, DistKind, InputError, LengthDist, Mode, Phase, Role, RewardSource
from yatt.core.runnable import check_runnable
from yatt.core.schedule import step_schedule
from yatt.sim import make_plan, simulate, summarize

COST = FakeCostModel()


def _exp(w, genrm: str):
    if genrm == "none":
        return experiment(w, genrm=None, algo=AlgoSpec(reward=RewardSource.RULE))
    return experiment(w, genrm=GENRM_TINY)


def _plan(exp, genrm: str, k: int, r: int = 4):
    return make_plan(exp, Mode.ASYNC, rollout_devices=r, genrm_devices=2 if genrm == "own" else 0,
                     max_staleness=k)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompts=st.integers(1, 12), group=st.integers(1, 4), seed=st.integers(0, 10_000),
       median=st.integers(5, 600), sigma=st.floats(0.0, 1.5), cap=st.integers(50, 3000),
       k=st.integers(1, 3), steps=st.integers(1, 6), r=st.sampled_from([2, 4]),
       genrm=st.sampled_from(["none", "shared", "own"]), ds=st.booleans())
def test_async_bounds_and_each_sample_once(prompts, group, seed, median, sigma, cap, k, steps, r,
                                           genrm, ds):
    w = workload(prompts, group, ds=ds and group > 1, p_equal=0.4, rounds=1)
    w = type(w)(**{**w.__dict__, "response_len": LengthDist(DistKind.LOGNORMAL, median, sigma=sigma,
                                                             min=1, max=cap)})
    exp = _exp(w, genrm)
    plan = _plan(exp, genrm, k, r)
    tr = simulate(plan, w, COST, seed, steps=steps)
    # every sample generated (and judged) once, trained once when kept
    ids = Counter((s.step, s.sample_id) for s in tr.samples)
    assert ids and max(ids.values()) == 1
    assert sorted({s.step for s in tr.samples}) == list(range(steps))
    for s in tr.samples:
        assert s.rollout_end_s is not None
        if genrm != "none":
            assert s.genrm_end_s is not None and s.genrm_end_s >= s.rollout_end_s
        assert (s.dp_rank >= 0) == s.kept
    for step in range(steps):
        kept = [s for s in tr.samples if s.step == step and s.kept]
        trained = sum(sp.tokens for sp in tr.spans
                      if sp.phase is Phase.TRAIN and sp.step == step and sp.name == "train e0")
        assert trained == sum(s.prompt_tokens + s.response_tokens for s in kept)
    # staleness: the trainer trains step s at version s; nothing trained lags by more than k
    for s in tr.samples:
        assert 0 <= s.step - s.policy_version <= k
    per = {x["step"]: x for x in tr.meta.extra["steps"]}
    for s in range(steps):
        x = per[s]
        # a sample is generated before it is trained, and after the last train step whose
        # weights generate it
        assert x["train_start_s"] >= x["gen_end_s"] - 1e-9
        if x["policy_version"] > 0:
            assert x["gen_start_s"] >= per[x["policy_version"] - 1]["train_end_s"] - 1e-9
        if s:
            assert x["train_start_s"] >= per[s - 1]["train_end_s"] - 1e-9
            assert x["gen_start_s"] >= per[s - 1]["gen_end_s"] - 1e-9
        # the queue bound: rollout of s waits for train step s - k - 1
        if s - k - 1 >= 0:
            assert x["gen_start_s"] >= per[s - k - 1]["train_end_s"] - 1e-9
    # at no time are more than k + 1 steps generated-or-generating but not yet trained
    for s in range(steps):
        t = per[s]["gen_start_s"]
        open_steps = [j for j in range(steps)
                      if per[j]["gen_start_s"] <= t < per[j]["train_end_s"]]
        assert len(open_steps) <= k + 1


def test_trainer_and_generators_never_share_a_device():
    w = workload(8, 4)
    plan = _plan(_exp(w, "own"), "own", 1)
    gen = set(plan.placement(Role.ROLLOUT).devices) | set(plan.placement(Role.GENRM).devices)
    assert not gen & set(plan.placement(Role.TRAINER).devices)
    assert set(plan.placement(Role.REFERENCE).devices) == set(plan.placement(Role.TRAINER).devices)
    tr = simulate(plan, w, COST, 0, steps=3)
    train_devs = set(plan.placement(Role.TRAINER).devices)
    for sp in tr.spans:
        if sp.phase in (Phase.ROLLOUT, Phase.GENRM):
            assert not set(sp.devices) & train_devs


def test_overlap_steady_state_and_warmup():
    """Training of step t overlaps generation of step t + 1; the first step (the fill) is
    reported apart and the steady-state step time is the mean over the later steps."""
    w = workload(16, 4)
    exp = _exp(w, "own")
    tr = simulate(_plan(exp, "own", 1), w, COST, 1, steps=4)
    per = {x["step"]: x for x in tr.meta.extra["steps"]}
    assert per[1]["gen_start_s"] < per[0]["train_end_s"]  # step 1 generated while 0 trains
    info = tr.meta.extra["async"]
    assert info["warmup_steps"] == 1 and info["warmup_s"] == pytest.approx(per[0]["train_end_s"])
    steady = [per[s]["step_time_s"] for s in (1, 2, 3)]
    assert info["steady_step_s"] == pytest.approx(sum(steady) / 3)
    assert summarize(tr).step_time_mean == pytest.approx(info["steady_step_s"])
    # step times add up to the run: consecutive train ends
    assert sum(x["step_time_s"] for x in per.values()) == pytest.approx(per[3]["train_end_s"])


def test_weight_sync_charged_on_both_sides():
    w = workload(8, 4)
    exp = _exp(w, "none")
    tr = simulate(_plan(exp, "none", 1), w, COST, 0, steps=3)
    sends = [s for s in tr.spans if s.phase is Phase.WEIGHT_SYNC and s.role is Role.TRAINER]
    takes = [s for s in tr.spans if s.phase is Phase.WEIGHT_SYNC and s.role is Role.ROLLOUT]
    assert len(sends) == 3  # after every train step
    assert takes and all(s.duration == pytest.approx(sends[0].duration) for s in takes)
    assert sends[0].duration > 0


def test_training_bound_blocks_rollout_and_k2_lags_two_versions():
    """A slow trainer: the queue bound blocks the rollout at k = 1; at k = 2 the rollout
    runs one step further ahead, its samples lag two versions, and its steady state is no
    slower."""
    w = workload(16, 4, sigma=1.2)
    exp = _exp(w, "none")
    slow = FakeCostModel(train_s_per_btok=3e-3)
    t = {k: simulate(_plan(exp, "none", k, r=6), w, slow, 2, steps=6) for k in (1, 2)}
    blocked = {k: sum(x["gen_blocked_s"] for x in t[k].meta.extra["steps"]) for k in t}
    assert blocked[1] > 0
    assert max(s.step - s.policy_version for s in t[1].samples) == 1
    assert max(s.step - s.policy_version for s in t[2].samples) == 2
    s = {k: t[k].meta.extra["async"]["steady_step_s"] for k in t}
    assert s[2] <= s[1] + 1e-9


def test_schedule_async_phases():
    sc = step_schedule(Mode.ASYNC, genrm=True, genrm_shared=True)
    assert sc.overlapped and sc.refill
    assert Phase.TRAIN in sc.phases() and Phase.OFFLOAD not in [s.phase for s in sc.finish]
    own = step_schedule(Mode.ASYNC, genrm=True)
    assert own.generate[0].streams and not own.refill


def test_executor_runs_k1_k2_and_refuses_larger_bounds_in_one_line():
    w = workload(8, 4)
    for k in (1, 2):
        check_runnable(_plan(_exp(w, "none"), "none", k), 1)
    with pytest.raises(InputError) as e:
        check_runnable(_plan(_exp(w, "none"), "none", 3), 1)
    assert e.value.field == "max_staleness" and "\n" not in str(e.value)
    assert "allowed: 1|2" in str(e.value), str(e.value)


def test_async_plan_refuses_shared_trainer_devices():
    from yatt.core import Plan, RolePlacement

    w = workload(8, 4)
    exp = _exp(w, "none")
    with pytest.raises(InputError, match="disjoint"):
        Plan(Mode.ASYNC, (RolePlacement(Role.ROLLOUT, (0, 1, 2, 3)),
                          RolePlacement(Role.TRAINER, tuple(range(8))),
                          RolePlacement(Role.REFERENCE, tuple(range(8)))), exp)


def test_async_plan_round_trips_through_yaml(tmp_path):
    from yatt.core.config import dump_yaml, load_plan

    w = workload(8, 4)
    plan = _plan(_exp(w, "own"), "own", 2)
    dump_yaml(plan, tmp_path / "plan.yaml")
    back = load_plan(tmp_path / "plan.yaml")
    assert back == plan and back.max_staleness == 2 and not back.genrm_shares_rollout


def test_summary_covers_the_steady_window():
    """Device and throughput figures of an async trace cover the steps its step time
    averages: from the warm-up's train end to the last train end."""
    w = workload(16, 4)
    tr = simulate(_plan(_exp(w, "none"), "none", 1), w, COST, 0, steps=4)
    per = {x["step"]: x for x in tr.meta.extra["steps"]}
    st = summarize(tr)
    assert st.steps == 3
    assert st.run_time == pytest.approx(per[3]["train_end_s"] - per[0]["train_end_s"])
    assert st.samples_kept == sum(1 for s in tr.samples if s.kept and s.step >= 1)
    assert all(0 <= b <= st.run_time + 1e-9 for b in st.device_busy.values())
    assert 0 <= st.bubble_fraction < 1
