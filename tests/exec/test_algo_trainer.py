"""The algorithm options inside the real Megatron trainer (1 spawned CPU rank, gloo):
PPO epochs with adaptive acceptance, length-based micro-batches, dual clip, k1 KL, the lr
passed per step, an empty batch (dynamic sampling), the NaN guard's counter, mini-batches
and the old-log-prob pass."""
from __future__ import annotations

import dataclasses
import os

import pytest

pytest.importorskip("megatron.core")

from tests.exec._tolerance import gamma, logprob_tol  # noqa: E402
from tests.exec._train_helpers import (built_model, free_port, load_spec, make_batch,  # noqa: E402
                                       plain_algo)


def _rank(rank: int, world: int, port: int, out_dir: str) -> None:
    import torch
    torch.set_num_threads(1)
    from yatt.core.specs import KLEstimator
    from yatt.exec.train_batch import TrainBatch
    from yatt.exec.trainer import MegatronTrainer

    spec = load_spec()
    algo = plain_algo(lr=1e-3, kl_coef=0.2, entropy_coef=0.1, kl_estimator=KLEstimator.K1,
                      dual_clip=3.0, ppo_epochs=3, seq_len_batching=True, adaptive_accept=True)
    tr = MegatronTrainer(spec, str(built_model(spec)), algo, tp=1, dp=1, rank=0,
                         master_addr="127.0.0.1", master_port=port)
    b = make_batch(0, n=12)
    lp0 = tr.logprobs(b.input_ids, b.prompt_lens)
    b = dataclasses.replace(b, ref_logprobs=tuple(tuple(x - 0.05 for x in r) for r in lp0))
    res = {"m": [tr.train_step(b, lr=0.05) for _ in range(2)]}     # big lr: ratios move
    res["seq"] = max(len(x) for x in b.input_ids)
    res["lp_scale"] = max(abs(x) for r in lp0 for x in r)
    res["empty"] = tr.train_step(TrainBatch((), (), ()), lr=1e-3)
    res["nan"] = tr.train_step(dataclasses.replace(b, advantages=(float("nan"),) * 12))
    tr.shutdown()
    torch.save(res, os.path.join(out_dir, "r.pt"))


@pytest.mark.slow
def test_trainer_algorithm_options(tmp_path):
    import torch
    import torch.multiprocessing as mp

    mp.spawn(_rank, args=(1, free_port(), str(tmp_path)), nprocs=1, join=True)
    r = torch.load(tmp_path / "r.pt", weights_only=False)
    for m in r["m"]:
        assert m["lr"] == pytest.approx(0.05)
        assert m["accept_frac"] in (1.0, 0.7, 0.5) and 0.0 <= m["clip_frac"] <= 1.0
        assert m["skipped"] == 0.0 and m["tokens"] > 0
    # with lr 0.05 the 3rd epoch's policy has moved: some tokens clip, acceptance reacts
    assert max(m["clip_frac"] for m in r["m"]) > 0.0
    assert min(m["accept_frac"] for m in r["m"]) < 1.0
    # k1 on the first epoch: the mean of lp - (lp0 - 0.05), lp and lp0 the same weights'
    # log-probs from differently shaped batches, so 0.05 within rounding
    tol = logprob_tol(load_spec(), r["seq"], r["lp_scale"]) + gamma(int(r["m"][0]["tokens"])) * r["lp_scale"]
    assert r["m"][0]["kl"] == pytest.approx(0.05, abs=tol)
    e = r["empty"]
    assert e["tokens"] == 0.0 and e["skipped"] == 0.0 and e["lr"] == pytest.approx(1e-3)
    n = r["nan"]
    assert n["skipped"] == 3.0 and n["nonfinite_steps"] == 3.0       # every epoch skipped, counted


def _mini_rank(rank: int, world: int, port: int, out_dir: str) -> None:
    import torch
    torch.set_num_threads(1)
    from yatt.core.specs import OldLogprobs
    from yatt.exec.train_batch import TrainBatch
    from yatt.exec.trainer import MegatronTrainer

    spec = load_spec()
    tr = MegatronTrainer(spec, str(built_model(spec)), plain_algo(lr=0.05), tp=1, dp=1, rank=0,
                         master_addr="127.0.0.1", master_port=port)
    b = make_batch(0, n=12)
    snap = tr.snapshot()
    res = {}
    for name, algo in (("reuse", plain_algo(lr=0.05)),
                       ("recompute", plain_algo(lr=0.05, old_logprobs=OldLogprobs.RECOMPUTE)),
                       ("mini2", plain_algo(lr=0.05, old_logprobs=OldLogprobs.RECOMPUTE,
                                            mini_batches=2))):
        tr.restore(snap)
        tr.algo = algo
        res[name] = tr.train_step(b)
        res[name]["steps"] = tr.steps - snap["steps"]
    res["empty"] = tr.train_step(TrainBatch((), (), ()))
    tr.shutdown()
    torch.save(res, os.path.join(out_dir, "mini.pt"))


@pytest.mark.slow
def test_mini_batches_and_the_old_logprob_pass(tmp_path):
    """recompute == reuse with one mini-batch (the pass computes exactly the first training
    forward's log-probs); two mini-batches take two optimizer steps, and the second one's
    ratio is against the pre-update old log-probs, so with a large lr tokens clip in the
    very first epoch (with one mini-batch every first-epoch ratio is exactly 1)."""
    import torch
    import torch.multiprocessing as mp

    mp.spawn(_mini_rank, args=(1, free_port(), str(tmp_path)), nprocs=1, join=True)
    r = torch.load(tmp_path / "mini.pt", weights_only=False)
    for k in ("loss", "grad_norm", "kl", "entropy", "tokens"):
        assert r["recompute"][k] == r["reuse"][k], k
    assert r["reuse"]["steps"] == r["recompute"]["steps"] == 1
    assert r["reuse"]["clip_frac"] == 0.0
    assert r["mini2"]["steps"] == 2 and r["mini2"]["tokens"] == r["reuse"]["tokens"]
    assert r["mini2"]["clip_frac"] > 0.0
    assert r["empty"]["tokens"] == 0.0 and r["empty"]["skipped"] == 0.0
