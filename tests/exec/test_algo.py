"""The RL algorithm's pure functions on small hand-computed tensors (yatt/exec/algo.py)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from yatt.core.config import load_experiment  # noqa: E402
from yatt.core.errors import InputError  # noqa: E402
from yatt.core.schema import from_dict  # noqa: E402
from yatt.core.specs import AlgoSpec, KLEstimator, LrSchedule  # noqa: E402
from yatt.exec import algo  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

T = torch.tensor


def test_group_advantages_mean_and_std():
    r = T([1.0, 0.0, 0.0, 0.0, 2.0, 4.0])
    g = T([7, 7, 7, 7, 3, 3])
    # group 7: mean .25, pop std sqrt(3)/4 ; group 3: mean 3, std 1
    a = algo.group_advantages(r, g, use_std=True, eps=0.0)
    s = math.sqrt(3) / 4
    assert a.tolist() == pytest.approx([0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s, -1.0, 1.0])
    m = algo.group_advantages(r, g, use_std=False)
    assert m.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25, -1.0, 1.0])


def test_all_equal_group_has_zero_advantage():
    a = algo.group_advantages(T([1.0, 1.0, 0.0, 1.0]), T([0, 0, 1, 1]))
    assert a[:2].tolist() == [0.0, 0.0]
    assert a[2] < 0 < a[3]


def test_batch_normalisation():
    r = T([1.0, 3.0])
    assert algo.normalize_rewards(r, eps=0.0).tolist() == pytest.approx([-1.0, 1.0])
    # mean-only group advantage after batch norm with global mean 2, std 2
    a = algo.step_advantages(T([1.0, 3.0]), T([0, 0]), use_std=False, reward_norm=True,
                             batch_mean=2.0, batch_std=2.0, eps=0.0)
    assert a.tolist() == pytest.approx([-0.5, 0.5])


def test_ppo_clip_by_hand():
    lp, old = T([math.log(1.5), math.log(0.5), math.log(1.1)]), T([0.0, 0.0, 0.0])
    # ratio 1.5, A=+1: clipped to 1.2 -> loss -1.2; ratio .5, A=-1: min(-.5, -.8) = -.8 -> .8
    # ratio 1.1, A=+2: unclipped -> -2.2
    loss = algo.ppo_clip_loss(lp, old, T([1.0, -1.0, 2.0]), 0.2)
    assert loss.tolist() == pytest.approx([-1.2, 0.8, -2.2])
    assert algo.clipped_tokens(lp, old, T([1.0, -1.0, 2.0]), 0.2).tolist() == [True, True, False]


def test_dual_clip_bounds_negative_advantage():
    lp, old, adv = T([math.log(5.0), math.log(5.0)]), T([0.0, 0.0]), T([-1.0, 1.0])
    plain = algo.ppo_clip_loss(lp, old, adv, 0.2)
    assert plain.tolist() == pytest.approx([5.0, -1.2])        # ratio 5 on a bad action: 5
    dual = algo.ppo_clip_loss(lp, old, adv, 0.2, dual_clip=3.0)
    assert dual.tolist() == pytest.approx([3.0, -1.2])          # capped at c*|A|; A>0 unchanged


def test_behaviour_weight_by_hand():
    """min(pi_old / mu, cap) per token, without gradient: 0.5 / 0.25 = 2 capped at 1.5;
    0.5 / 0.5 = 1; 0.2 / 0.8 = 0.25 (a token the stale policy liked more weighs less)."""
    prox = T([math.log(0.5), math.log(0.5), math.log(0.2)], requires_grad=True)
    behav = T([math.log(0.25), math.log(0.5), math.log(0.8)])
    w = algo.behaviour_weight(prox, behav, cap=1.5)
    assert w.tolist() == pytest.approx([1.5, 1.0, 0.25])
    assert not w.requires_grad


def test_policy_gradient_sign():
    lp = T([0.0], requires_grad=True)
    algo.ppo_clip_loss(lp, lp.detach(), T([1.0]), 0.2).sum().backward()
    assert lp.grad.item() < 0      # minimising raises the log-prob of a positive-advantage token


def test_kl_estimators():
    lp, ref = T([math.log(0.5), math.log(0.2)]), T([math.log(0.25), math.log(0.4)])
    assert algo.kl_k1(lp, ref).tolist() == pytest.approx([math.log(2), math.log(0.5)])
    r = ref - lp
    assert algo.kl_k3(lp, ref).tolist() == pytest.approx((torch.exp(r) - r - 1).tolist())
    assert algo.KL_ESTIMATORS[KLEstimator.K1] is algo.kl_k1
    assert algo.KL_ESTIMATORS[KLEstimator.K3] is algo.kl_k3
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(1000, generator=g) * 3, torch.randn(1000, generator=g) * 3
    assert (algo.kl_k3(a, b) >= 0).all()
    assert (algo.kl_k1(a, b) < 0).any()                    # k1 is not >= 0 per token
    assert algo.kl_k3(a, a).abs().max() == 0


def test_total_loss_signs_entropy_is_a_bonus():
    pg, kl, ent = T([1.0]), T([0.5]), T([2.0])
    assert algo.total_token_loss(pg, kl, ent, 0.2, 0.1).item() == pytest.approx(1.0 + 0.1 - 0.2)
    more_ent = algo.total_token_loss(pg, kl, T([3.0]), 0.2, 0.1)
    more_kl = algo.total_token_loss(pg, T([1.0]), ent, 0.2, 0.1)
    base = algo.total_token_loss(pg, kl, ent, 0.2, 0.1)
    assert more_ent < base < more_kl
    # gradient: the entropy term pushes logits towards uniform
    z = T([[2.0, 0.0, 0.0]], requires_grad=True)
    algo.total_token_loss(T([0.0]), T([0.0]), algo.entropy_from_logits(z), 0.2, 0.1).sum().backward()
    assert z.grad[0, 0] > 0 and z.grad[0, 1] < 0


def test_entropy_and_guards():
    assert algo.entropy_from_logits(T([[0.0, 0.0]])).item() == pytest.approx(math.log(2))
    assert algo.masked_mean(T([1.0, 3.0, 100.0]), T([1.0, 1.0, 0.0])).item() == 2.0
    assert algo.is_finite(T([1.0])) and not algo.is_finite(T([float("nan")]))
    assert not algo.is_finite(float("inf"))


def test_cosine_lr_with_warmup():
    kw = dict(total_steps=12, schedule=LrSchedule.COSINE, warmup_steps=2, min_ratio=0.1)
    lrs = [algo.lr_at(s, 1.0, **kw) for s in range(12)]
    assert lrs[0] == pytest.approx(0.5) and lrs[1] == pytest.approx(1.0)   # linear warmup
    assert lrs[2] == pytest.approx(1.0) and lrs[-1] == pytest.approx(0.1)  # cosine to the floor
    mid = 2 + (12 - 2 - 1) / 2                                            # t = 0.5
    assert algo.lr_at(int(mid), 1.0, **kw) < 1.0
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:]))
    assert algo.lr_at(7, 0.3, total_steps=12) == 0.3                       # constant default


def test_seq_len_batch_size_rule():
    assert [algo.batch_size_for_len(n) for n in (10, 512, 513, 1024, 1025, 8000)] == \
        [32, 32, 16, 16, 8, 8]
    groups = algo.micro_batches_by_length([100] * 40 + [600] * 20 + [2000] * 9)
    assert sum(groups, []) == list(range(69))
    assert [len(g) for g in groups] == [32, 16, 12, 8, 1]   # 8x100+8x600 share a 16-batch


def test_adaptive_acceptance_rule():
    assert [algo.acceptance_fraction(x) for x in (0.0, 0.099, 0.1, 0.29, 0.3, 0.9)] == \
        [1.0, 1.0, 0.7, 0.7, 0.5, 0.5]
    clip = [0.5, 0.0, 0.2, 0.9, 0.1, 0.0, 0.3, 0.4, 0.6, 0.7]
    assert algo.accept_sequences(clip, 1.0) == list(range(10))
    assert algo.accept_sequences(clip, 0.7) == [0, 1, 2, 4, 5, 6, 7]     # 7 least clipped
    assert algo.accept_sequences(clip, 0.5) == [1, 2, 4, 5, 6]
    assert algo.accept_sequences([0.3], 0.5) == [0]                      # never empties a rank
    assert algo.accept_sequences([], 0.5) == []


def test_all_equal_groups():
    assert algo.all_equal_groups({1: [0, 0, 0], 2: [0, 1, 0], 3: [1.0, 1.0]}) == [1, 3]


def test_algo_spec_new_fields_and_backward_compat():
    a = from_dict(AlgoSpec, {"name": "grpo", "lr": 1e-4})
    assert (a.kl_coef, a.entropy_coef, a.kl_estimator, a.lr_schedule) == \
        (0.2, 0.1, KLEstimator.K3, LrSchedule.CONSTANT)
    assert not (a.dual_clip or a.seq_len_batching or a.adaptive_accept or a.reward_norm)
    b = from_dict(AlgoSpec, {"kl_estimator": "k1", "lr_schedule": "cosine", "dual_clip": 3,
                             "adaptive_accept": True, "lr_warmup_steps": 2})
    assert b.kl_estimator is KLEstimator.K1 and b.dual_clip == 3.0
    with pytest.raises(InputError, match="dual_clip"):
        from_dict(AlgoSpec, {"dual_clip": 0.5})
    with pytest.raises(InputError, match="kl_estimator"):
        from_dict(AlgoSpec, {"kl_estimator": "k2"})
    for cfg in ("demo-cpu.yaml", "default.yaml"):
        load_experiment(ROOT / "configs" / cfg)


def test_trainer_splits_mini_batches_as_the_simulator_does():
    """The trainer splits a rank's share with core.balance.mini_batches, the function the
    simulator charges (one optimizer step per mini-batch, larger first, empty ones kept)."""
    from yatt.core import balance
    from yatt.exec import trainer
    assert trainer.mini_batches is balance.mini_batches
    assert balance.mini_batches(range(5), 2) == [[0, 1, 2], [3, 4]]
    assert balance.mini_batches(range(2), 3) == [[0], [1], []]
    assert balance.mini_batches(range(0), 1) == [[]]


def test_reuse_with_several_mini_batches_is_planned_but_not_run(demo_experiment):
    """The planner prices reuse as no pass (verl may reuse the rollout's log-probs); the
    executor's reuse is the first training forward, so `yatt run` refuses it with more than
    one mini-batch, in one line naming algo.old_logprobs."""
    import dataclasses

    from yatt.core.roles import Mode, ReleasePolicy
    from yatt.core.runnable import check_runnable
    from yatt.core.specs import OldLogprobs
    from yatt.sim import make_plan

    def plan(algo):
        return make_plan(dataclasses.replace(demo_experiment, algo=algo), Mode.COLOCATE,
                         release=ReleasePolicy.TEARDOWN)
    reuse = dataclasses.replace(demo_experiment.algo, mini_batches=2)
    with pytest.raises(InputError, match="algo.old_logprobs") as e:
        check_runnable(plan(reuse), 2)
    assert "\n" not in str(e.value) and "allowed: old_logprobs: recompute" in str(e.value)
    check_runnable(plan(dataclasses.replace(reuse, old_logprobs=OldLogprobs.RECOMPUTE)), 2)
    assert AlgoSpec(mini_batches=2).mini_batches == 2
