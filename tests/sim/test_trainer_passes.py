"""The trainer's passes in the simulator: mini-batches (one gradient sync and optimizer step
each), the recomputed old-log-prob forward, and the step order that carries them."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fakecost import FakeCostModel
from helpers import experiment, workload
from yatt.core import AlgoSpec, Mode, Phase, Role
from yatt.core.balance import mini_batches
from yatt.core.schedule import step_schedule
from yatt.core.specs import OldLogprobs
from yatt.sim import make_plan, simulate

COST = FakeCostModel()


def _trace(algo: AlgoSpec, mode=Mode.COLOCATE, seed=3, prompts=24, **kw):
    w = workload(prompts, 4, ds=True, p_equal=0.3, rounds=2)
    plan = make_plan(experiment(w, algo=algo), mode, rollout_devices=4, **kw)
    return plan, simulate(plan, w, COST, seed)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10_000), max_size=60), st.integers(1, 12))
def test_mini_batches_split_a_share_in_order(share, k):
    mbs = mini_batches(share, k)
    assert len(mbs) == k
    assert [i for mb in mbs for i in mb] == share
    sizes = [len(mb) for mb in mbs]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(1, 6), epochs=st.integers(1, 3), seed=st.integers(0, 1000),
       mode=st.sampled_from([Mode.COLOCATE, Mode.PARTIAL]))
def test_each_mini_batch_pays_one_grad_sync_and_every_token_trains_once_per_epoch(k, epochs, seed, mode):
    # mini_batches > 1 needs recomputed old log-probs (AlgoSpec refuses reuse); both runs
    # recompute, so they differ only in the mini-batches
    rec = OldLogprobs.RECOMPUTE
    plan, one = _trace(AlgoSpec(ppo_epochs=epochs, old_logprobs=rec), mode, seed)
    _, many = _trace(AlgoSpec(ppo_epochs=epochs, mini_batches=k, old_logprobs=rec), mode, seed)
    syncs = [s for s in many.spans if s.phase is Phase.TRAIN and s.name.startswith("grad_sync")]
    assert len(syncs) == k * epochs
    gs = COST.grad_sync_time(plan.experiment.actor, plan.placement(Role.TRAINER).parallel)
    assert all(s.duration == pytest.approx(gs) for s in syncs)
    kept = sum(s.prompt_tokens + s.response_tokens for s in many.samples if s.kept)
    trained = sum(s.tokens for s in many.spans if s.phase is Phase.TRAIN
                  and not s.name.startswith("grad_sync"))
    assert trained == kept * epochs
    # the slowest rank of each mini-batch gates it: sum of maxima >= max of sums, and every
    # extra optimizer step adds its gradient sync
    t1, tk = one.step_times()[0], many.step_times()[0]
    assert tk >= t1 + (k - 1) * epochs * gs - 1e-9


def test_one_mini_batch_keeps_the_epoch_names():
    _, tr = _trace(AlgoSpec(ppo_epochs=2))
    names = {s.name for s in tr.spans if s.phase is Phase.TRAIN}
    assert {"train e0", "train e1", "grad_sync e0", "grad_sync e1"} == names
    _, tr = _trace(AlgoSpec(mini_batches=2, old_logprobs=OldLogprobs.RECOMPUTE))
    names = {s.name for s in tr.spans if s.phase is Phase.TRAIN}
    assert {"train e0 mb0", "train e0 mb1", "grad_sync e0 mb0", "grad_sync e0 mb1"} == names


@pytest.mark.parametrize("mode", [Mode.COLOCATE, Mode.PARTIAL])
def test_recompute_adds_the_trainers_forward_before_training(mode):
    plan, reuse = _trace(AlgoSpec(), mode, trainer_tp=2)
    _, again = _trace(AlgoSpec(old_logprobs=OldLogprobs.RECOMPUTE), mode, trainer_tp=2)
    assert not [s for s in reuse.spans if s.phase is Phase.OLD_LOGPROB]
    old = [s for s in again.spans if s.phase is Phase.OLD_LOGPROB]
    tr = plan.placement(Role.TRAINER)
    assert {s.role for s in old} == {Role.TRAINER} and len(old) == tr.dp
    assert {s.devices for s in old} == set(tr.groups())
    # each rank's forward over its own share, priced at the trainer's TP/PP
    lens = {}
    for smp in again.samples:
        if smp.kept:
            lens.setdefault(smp.dp_rank, []).append(smp.prompt_tokens + smp.response_tokens)
    want = max(COST.logprob_time(plan.experiment.actor, v, tr.parallel) for v in lens.values())
    assert max(s.duration for s in old) == pytest.approx(want)
    assert again.step_times()[0] == pytest.approx(reuse.step_times()[0] + want)
    # after the trainer is loaded, before the reference pass and training
    first = {ph: min(s.start_s for s in again.spans if s.phase is ph)
             for ph in (Phase.OLD_LOGPROB, Phase.REF_LOGPROB, Phase.TRAIN)}
    assert first[Phase.OLD_LOGPROB] < first[Phase.REF_LOGPROB] < first[Phase.TRAIN]


def test_schedule_places_the_old_logprob_pass():
    for mode in Mode:
        plain = step_schedule(mode).phases()
        rec = step_schedule(mode, old_logprobs=OldLogprobs.RECOMPUTE).phases()
        assert Phase.OLD_LOGPROB not in plain
        i = rec.index(Phase.OLD_LOGPROB)
        assert rec[:i] + rec[i + 1:] == plain
        # after the trainer is loaded (async: its devices are its own, no reload)
        before = Phase.GENRM if mode is Mode.ASYNC else Phase.RELOAD
        assert rec[i - 1] is before and rec[i + 1] is Phase.REF_LOGPROB
        rec = step_schedule(mode, reference=False, old_logprobs=OldLogprobs.RECOMPUTE).phases()
        assert rec[rec.index(Phase.OLD_LOGPROB) + 1] is Phase.TRAIN


def test_recompute_trace_round_trips(tmp_path):
    from yatt.core import Trace

    _, tr = _trace(AlgoSpec(old_logprobs=OldLogprobs.RECOMPUTE, mini_batches=2))
    p = tmp_path / "t.jsonl"
    tr.write_jsonl(p)
    back = Trace.read_jsonl(p)
    assert [s.phase for s in back.spans] == [s.phase for s in tr.spans]
    assert back.meta.plan.experiment.algo == dataclasses.replace(
        AlgoSpec(), old_logprobs=OldLogprobs.RECOMPUTE, mini_batches=2)
