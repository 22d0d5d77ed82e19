from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fakecost import FakeCostModel
from helpers import GENRM_BIG, GENRM_TINY, experiment, workload
from yatt.core import InputError, Mode, Phase, Role, TraceSource
from yatt.core.schedule import step_schedule
from yatt.sim import make_plan, simulate, summarize

COST = FakeCostModel()


def plans(exp):
    return [make_plan(exp, Mode.COLOCATE), make_plan(exp, Mode.PARTIAL, rollout_devices=4)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompts=st.integers(1, 24), k=st.integers(1, 6), seed=st.integers(0, 10_000),
       ds=st.booleans(), p=st.floats(0.0, 0.9), mode=st.sampled_from([Mode.COLOCATE, Mode.PARTIAL]))
def test_every_sample_generated_judged_trained_once(prompts, k, seed, ds, p, mode):
    w = workload(prompts, k, ds=ds, p_equal=p, rounds=2)
    exp = experiment(w)
    plan = make_plan(exp, mode, rollout_devices=4)
    tr = simulate(plan, w, COST, seed)
    ids = [s.sample_id for s in tr.samples]
    assert len(ids) == len(set(ids))
    kept = [s for s in tr.samples if s.kept]
    dropped = [s for s in tr.samples if not s.kept]
    for s in tr.samples:
        assert s.rollout_end_s is not None and s.genrm_end_s is not None
        assert s.genrm_end_s >= s.rollout_end_s
    assert all(s.dp_rank >= 0 for s in kept) and all(s.dp_rank == -1 for s in dropped)
    # trained tokens = tokens of kept samples, each once, in the TRAIN spans of one epoch
    trained = sum(sp.tokens for sp in tr.spans if sp.phase is Phase.TRAIN and sp.name == "train e0")
    assert trained == sum(s.prompt_tokens + s.response_tokens for s in kept)
    groups = Counter((s.round, s.prompt_id) for s in dropped)
    assert tr.meta.extra["steps"][0]["dropped_groups"] == len(groups)
    assert all(n == k for n in groups.values())
    if not ds:
        assert not dropped and len(kept) == prompts * k
    else:  # each dropped group below the last round is replaced
        rounds = max(s.round for s in tr.samples)
        for r in range(rounds):
            n_drop = len({g for g in groups if g[0] == r})
            assert len({s.prompt_id for s in tr.samples if s.round == r + 1}) == n_drop


def _overlaps(spans):
    by = {}
    for s in spans:
        for d in s.devices:
            by.setdefault(d, []).append((s.start_s, s.end_s, s.phase))
    for ivs in by.values():
        ivs.sort()
        for (a0, a1, pa), (b0, b1, pb) in zip(ivs, ivs[1:]):
            if b0 < a1 - 1e-9 and pa is not pb:
                return True
    return False


@pytest.mark.parametrize("ds", [False, True])
def test_colocate_no_device_runs_two_phases_at_once(ds):
    w = workload(32, 4, ds=ds, p_equal=0.3)
    tr = simulate(make_plan(experiment(w), Mode.COLOCATE), w, COST, 3, steps=2)
    assert not _overlaps(tr.spans)


def test_partial_overlaps_genrm_with_rollout_tail():
    w = workload(64, 4)
    tr = simulate(make_plan(experiment(w), Mode.PARTIAL, rollout_devices=4), w, COST, 0)
    first_judged = min(s.genrm_end_s for s in tr.samples)
    last_rolled = max(s.rollout_end_s for s in tr.samples)
    assert first_judged < last_rolled


def test_step_time_lower_bound():
    w = workload(64, 4, sigma=1.0)
    exp = experiment(w)
    for plan in plans(exp):
        tr = simulate(plan, w, COST, 1)
        step = tr.step_times()[0]
        ro = plan.placement(Role.ROLLOUT)
        n_eng = ro.dp
        # rollout: even a perfect split of the decode steps at the smallest batch cost
        longest = max(s.response_tokens for s in tr.samples)
        lb_rollout = COST.decode_time(exp.actor, ro.tp, 1, 0, longest)
        lb_prefill = sum(COST.prefill_time(exp.actor, ro.tp, s.prompt_tokens)
                         for s in tr.samples) / n_eng
        toks = [s.prompt_tokens + s.response_tokens for s in tr.samples if s.kept]
        tp = plan.placement(Role.TRAINER)
        lb_train = COST.train_time(exp.actor, toks, tp.parallel) / tp.dp
        assert step >= lb_rollout + lb_train
        assert step >= lb_prefill + lb_train
        assert step >= sum(summarize(tr).phase_device_s.values()) / exp.cluster.num_gpus


def test_same_seed_same_trace_and_replay_reproduces():
    w = workload(24, 4, ds=True, p_equal=0.3)
    for plan in plans(experiment(w)):
        a = simulate(plan, w, COST, 7, steps=2)
        b = simulate(plan, w, COST, 7, steps=2)
        assert a == b
        assert a.meta.source is TraceSource.SIMULATED
        c = simulate(plan, w, COST, 7, steps=2, recorded=a.samples)
        assert c.step_times() == pytest.approx(a.step_times(), rel=1e-9)
        assert simulate(plan, w, COST, 8).samples != a.samples


def _rollout_end(trace) -> float:
    return max(s.end_s for s in trace.spans if s.phase is Phase.ROLLOUT)


@pytest.mark.parametrize("nodes, gpn", [(1, 8), (2, 8)])
def test_with_a_free_genrm_modes_differ_only_in_rollout_engines(nodes, gpn):
    """With the GenRM free (its generation and its offload/reload), partial and colocate
    differ only in how many engines roll out; the other roles switch and sync the same way
    in both. Partial on n devices rolls out on n/2 engines and ends its rollout exactly when
    colocate on n/2 devices (n/2 engines) does; after the rollout both modes run the same
    n-way reference and training, so what follows takes exactly as long as in colocate on
    the same n devices."""
    w = workload(64, 4)
    free = FakeCostModel(genrm_scale=0.0)
    n = nodes * gpn
    full = experiment(w, genrm=GENRM_BIG, nodes=nodes, gpn=gpn)
    half = experiment(w, genrm=GENRM_BIG, nodes=1, gpn=n // 2)
    col = simulate(make_plan(full, Mode.COLOCATE), w, free, 0)
    col_half = simulate(make_plan(half, Mode.COLOCATE), w, free, 0)
    par = simulate(make_plan(full, Mode.PARTIAL, rollout_devices=n // 2), w, free, 0)
    engines = lambda t: len({s.devices for s in t.spans if s.phase is Phase.ROLLOUT})  # noqa: E731
    assert (engines(col), engines(par), engines(col_half)) == (n, n // 2, n // 2)
    assert _rollout_end(par) == pytest.approx(_rollout_end(col_half), rel=1e-12)
    tail = lambda t: t.step_times()[0] - _rollout_end(t)  # noqa: E731
    assert tail(par) == pytest.approx(tail(col), rel=1e-12)
    # so colocate's extra rollout engines are its whole advantage here
    assert col.step_times()[0] < par.step_times()[0]


def test_partial_wins_heavy_genrm_expensive_switch_colocate_wins_tiny_genrm():
    w = workload(128, 4, resp=300)
    heavy = experiment(w, genrm=GENRM_BIG)
    cost = FakeCostModel(genrm_scale=3.0, switch_scale=40.0)
    col = simulate(make_plan(heavy, Mode.COLOCATE), w, cost, 0).step_times()[0]
    par = simulate(make_plan(heavy, Mode.PARTIAL, rollout_devices=4), w, cost, 0).step_times()[0]
    assert par < col
    tiny = experiment(w, genrm=GENRM_TINY)
    cheap = FakeCostModel()
    col = simulate(make_plan(tiny, Mode.COLOCATE), w, cheap, 0).step_times()[0]
    par = simulate(make_plan(tiny, Mode.PARTIAL, rollout_devices=4), w, cheap, 0).step_times()[0]
    assert col < par


def test_schedule_order_used_by_colocate():
    w = workload(8, 2)
    plan = make_plan(experiment(w), Mode.COLOCATE)
    tr = simulate(plan, w, COST, 0)
    order = []
    for s in sorted(tr.spans, key=lambda s: (s.start_s, s.end_s)):
        if not order or order[-1] != s.phase:
            order.append(s.phase)
    assert tuple(order) == step_schedule(Mode.COLOCATE).phases()


def test_weights_that_do_not_fit_raise_input_error():
    w = workload(4, 2)
    with pytest.raises(InputError):
        simulate(make_plan(experiment(w), Mode.COLOCATE), w, FakeCostModel(kv_tokens=0), 0)


def test_response_growth_scales_lengths():
    w0 = workload(64, 4, sigma=0.0)
    from dataclasses import replace
    w = replace(w0, response_growth_per_step=0.5)
    tr = simulate(make_plan(experiment(w), Mode.COLOCATE), w, COST, 0, steps=3)
    mean = {k: sum(s.response_tokens for s in tr.samples if s.step == k) / 256 for k in range(3)}
    assert mean[1] == pytest.approx(1.5 * mean[0], rel=0.01)
    assert mean[2] == pytest.approx(2.25 * mean[0], rel=0.01)
