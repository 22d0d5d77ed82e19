"""MegatronTrainer with real megatron-core on CPU/gloo (spawned processes, no mocks)."""
from __future__ import annotations

import math

import pytest
import torch

from tests.exec._tolerance import (adam_weight_tol, bf16_weight_tol, grad_norm_rel_tol, logprob_tol,
                                   loss_tol)
from tests.exec._train_helpers import (built_model, differing_leaves, hf_logprobs, load_spec,
                                       make_batch, spawn_trainers)
from yatt.core.errors import InputError
from yatt.exec.train_batch import TrainBatch, micro_batches


def _assert_same_training(got: dict, ref: dict, batch, lr: float) -> None:
    """Two trainings of one batch that differ only in their order of fp32 operations (TP
    shards, DP all-reduce, CPU against GPU) agree within the bounds of _tolerance: losses
    and gradient norms within rounding (the k-th step's passes round k times over), weights
    within what Adam can move a weight whose gradient is rounding noise."""
    spec = load_spec()
    seq = max(len(x) for x in batch.input_ids)
    amax = max(abs(a) for a in batch.advantages)
    lp_scale = max(abs(x) for r in ref["logprobs0"] for x in r)
    params = sum(v.numel() for v in ref["hf"].values())
    for k, (a, b) in enumerate(zip(got["metrics"], ref["metrics"]), 1):
        tokens = int(b["tokens"])
        assert a["tokens"] == b["tokens"]   # a count: exact
        tol = k * loss_tol(spec, seq, lp_scale, tokens, amax)
        assert abs(a["loss"] - b["loss"]) <= tol, (k, a["loss"], b["loss"], tol)
        tol = k * grad_norm_rel_tol(spec, seq, tokens, params) * max(abs(a["grad_norm"]), abs(b["grad_norm"]))
        assert abs(a["grad_norm"] - b["grad_norm"]) <= tol, (k, a["grad_norm"], b["grad_norm"], tol)
    steps = len(ref["metrics"])
    for name, w in ref["hf"].items():
        other = got["hf"][name].cpu().float()
        tol = adam_weight_tol(lr, steps, w.abs().max().item())
        diff = (other - w.float()).abs().max().item()
        assert diff <= tol, (name, diff, tol)


def test_micro_batches_respect_token_budget():
    lens = [5, 7, 3, 10, 2, 2]
    groups = micro_batches(lens, 16)
    assert sorted(sum(groups, [])) == list(range(len(lens)))
    for g in groups:
        assert len(g) == 1 or len(g) * max(lens[i] for i in g) <= 16


def test_train_batch_validates():
    with pytest.raises(InputError):
        TrainBatch(((1, 2, 3),), (3,), (1.0,))            # no response token
    with pytest.raises(InputError):
        TrainBatch(((1, 2, 3),), (1,), (1.0,), old_logprobs=((0.0,),))  # needs 2 values


@pytest.fixture(scope="module")
def tp1_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("tp1")
    # micro_batch_tokens=32 forces several micro-batches (padding + accumulation paths)
    return spawn_trainers({"tp": 1, "dp": 1, "steps": 4, "lr": 3e-4, "save_hf": True,
                           "nan_step": True, "micro_batch_tokens": 32}, d)[0]


def test_loss_decreases_on_fixed_batch(tp1_run):
    losses = [m["loss"] for m in tp1_run["metrics"]]
    assert losses[-1] < losses[0] - 1e-3, losses
    assert all(m["skipped"] == 0.0 and math.isfinite(m["grad_norm"]) for m in tp1_run["metrics"])
    assert tp1_run["metrics"][0]["tokens"] == sum(
        len(x) - p for x, p in zip(make_batch(0).input_ids, make_batch(0).prompt_lens))


def test_nan_step_is_skipped(tp1_run):
    assert tp1_run["nan_metrics"]["skipped"] == 1.0
    assert tp1_run["checksum_after_nan"] == tp1_run["checksum"]


def test_logprobs_match_transformers(tp1_run):
    b = make_batch(0)
    ref = hf_logprobs(built_model(load_spec()), b.input_ids, b.prompt_lens)
    got = tp1_run["logprobs0"]
    assert [len(x) for x in got] == [len(x) for x in ref]
    diff = max(abs(a - c) for x, y in zip(got, ref) for a, c in zip(x, y))
    tol = logprob_tol(load_spec(), max(len(x) for x in b.input_ids), max(abs(a) for x in ref for a in x))
    assert diff <= tol, (diff, tol)   # Megatron's kernels against transformers': rounding only


def test_hf_state_dict_loads_in_transformers(tp1_run):
    """The exported weights are the trained ones under transformers' names: loaded into the
    HF model they give the trainer's own post-training log-probs, which moved away from the
    starting weights' by more than the rounding tolerance."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(built_model(load_spec()), dtype=torch.float32)
    missing, unexpected = model.load_state_dict(tp1_run["hf"], strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied
    model.tie_weights()
    b = make_batch(0)
    got = []
    with torch.no_grad():
        for ids, p in zip(b.input_ids, b.prompt_lens):
            lp = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
            got.append([lp[t - 1, ids[t]].item() for t in range(p, len(ids))])
    want = tp1_run["logprobs_after"]
    width = max(len(x) for x in b.input_ids)
    tol = logprob_tol(load_spec(), width, max(abs(a) for x in want for a in x))
    diff = lambda u, v: max(abs(a - c) for x, y in zip(u, v) for a, c in zip(x, y))  # noqa: E731
    assert diff(got, want) <= tol, (diff(got, want), tol)
    assert diff(want, tp1_run["logprobs0"]) > 10 * tol     # the loaded weights are trained ones


@pytest.mark.slow
def test_tp2_matches_tp1_and_checkpoint_reshards(tp1_run, tmp_path):
    ckpt = tmp_path / "ckpt"
    res = spawn_trainers({"tp": 2, "dp": 1, "steps": 4, "lr": 3e-4, "save_hf": True,
                          "nan_step": True, "micro_batch_tokens": 32, "ckpt_dir": str(ckpt)},
                         tmp_path / "tp2")
    for r in res:
        _assert_same_training(r, tp1_run, make_batch(0), lr=3e-4)
    for k in tp1_run["hf"]:
        # exact: both TP ranks export the same all-gathered tensors
        assert torch.equal(res[0]["hf"][k], res[1]["hf"][k])
    # dist_checkpointing: saved at TP=2, loaded into a fresh TP=1 trainer (exact: resharding
    # moves bytes, it computes nothing)
    loaded = spawn_trainers({"tp": 1, "dp": 1, "steps": 0, "load_ckpt": str(ckpt)},
                            tmp_path / "load")[0]["loaded_hf"]
    for k, v in res[0]["ckpt_hf"].items():
        assert torch.equal(loaded[k], v), k


# PP=2 vs PP=1 on the same batch (tiny actor: P ~ 4.3e5 parameters, lr 3e-4, 4 steps).
# Stages hand activations and their gradients to each other bit-exactly, so a step does
# the same float operations as at PP=1 except two reductions: the gradient norm (a sum of
# per-stage partial sums of P squares) and, with tied embeddings, the embedding gradient
# (the first stage's and the last stage's parts summed by an all-reduce instead of
# accumulated in one buffer). A reordered fp32 sum of N terms moves by ~sqrt(N) * eps
# relative (eps = 1.2e-7): <= sqrt(P) * eps ~ 1e-4 for the norm (GRAD_NORM_REL) and a few
# ulps for the embedding gradient. Step 1's loss comes before any update: equal to the
# ulp (2 eps). Later losses see weights that moved differently by at most lr * 1e-4 per
# parameter per step (Adam's update is scale-free; the clip coefficient 1/norm carries the
# 1e-4): |dLoss| <= |grad| * |dw| <= 5 * sqrt(P) * 3 steps * lr * 1e-4 ~ 3e-4 (LOSS_ABS).
GRAD_NORM_REL = 1e-4
LOSS_ABS = 3e-4


@pytest.mark.slow
def test_pp2_matches_pp1_restores_exactly_and_checkpoint_reshards(tp1_run, tmp_path):
    """A PP=2 trainer (megatron's 1F1B schedule over gloo) trains like PP=1, exports the
    same HF weights, skips a NaN step, replays exactly from a snapshot and from an async
    checkpoint (written by a forked process), and its checkpoint loads at PP=1 and at TP=2."""
    ckpt = tmp_path / "ckpt"
    res = spawn_trainers({"tp": 1, "pp": 2, "dp": 1, "steps": 4, "lr": 3e-4, "save_hf": True,
                          "nan_step": True, "micro_batch_tokens": 32, "ckpt_dir": str(ckpt),
                          # megatron's forked writer (the GPU default); DP=2 tests the thread
                          "state_roundtrip": str(tmp_path / "rt"), "thread_writer": False},
                         tmp_path / "pp2")
    assert [r["pp_rank"] for r in res] == [0, 1]
    for r in res:
        for i, (a, b) in enumerate(zip(r["metrics"], tp1_run["metrics"])):
            assert a["tokens"] == b["tokens"]
            assert abs(a["loss"] - b["loss"]) <= (2 * 1.2e-7 * abs(b["loss"]) if i == 0 else LOSS_ABS)
            assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=GRAD_NORM_REL, abs=1e-6)
        assert r["nan_metrics"]["skipped"] == 1.0
        assert r["checksum_after_nan"] == r["checksum"]
        for a, b, c in zip(r["after"], r["after_restore"], r["after_load"]):
            for k in ("loss", "grad_norm", "kl", "entropy"):
                assert a[k] == b[k] == c[k], k
    assert set(res[0]["hf"]) == set(tp1_run["hf"])
    for k, v in tp1_run["hf"].items():
        assert torch.equal(res[0]["hf"][k], res[1]["hf"][k]), k   # every stage exports all
        assert torch.allclose(res[0]["hf"][k], v, atol=1e-5), k
    for opts in ({"tp": 1}, {"tp": 2}):
        loaded = spawn_trainers({**opts, "dp": 1, "steps": 0, "load_ckpt": str(ckpt)},
                                tmp_path / f"load-tp{opts['tp']}")[0]["loaded_hf"]
        for k, v in res[0]["ckpt_hf"].items():
            assert torch.equal(loaded[k], v), (opts, k)


@pytest.mark.slow
def test_dp2_ranks_stay_identical_and_match_full_batch(tmp_path):
    opts = {"tp": 1, "steps": 3, "lr": 3e-4, "save_hf": True, "split_of": 8,
            "distributed_optimizer": True}
    dp2 = spawn_trainers({**opts, "dp": 2}, tmp_path / "dp2")
    assert {r["dp_rank"] for r in dp2} == {0, 1}
    # exact: every DP rank applies the same all-reduced gradient with the same optimizer code
    assert dp2[0]["checksum"] == dp2[1]["checksum"]
    for k in dp2[0]["hf"]:
        assert torch.equal(dp2[0]["hf"][k], dp2[1]["hf"][k]), k
    dp1 = spawn_trainers({**opts, "dp": 1}, tmp_path / "dp1")[0]   # same 8 sequences, one rank
    _assert_same_training(dp2[0], dp1, make_batch(0, n=8), lr=3e-4)


def _replays(r: dict, *names: str) -> None:
    """The later steps' metrics under each replay in `names` equal the first run's exactly
    (the same ops in the same order on the same state)."""
    for k in ("loss", "grad_norm", "kl", "entropy", "tokens"):
        for name in names:
            assert [m[k] for m in r[name]] == [m[k] for m in r["after"]], (name, k)
    assert r["after"][0]["loss"] != r["after"][1]["loss"]   # not a trivial replay


def _restores_exactly(r: dict, fresh: dict) -> None:
    """A `state_roundtrip` + `replay_from_start` rank `r` and the same rank of a fresh
    trainer that loaded its checkpoint (`resume_from` + `later`) replay exactly."""
    _replays(r, "after_restore", "after_load")
    # a snapshot taken before the first step (no Adam state yet) restores to it
    assert r["metrics_again"] == [{**m, "step_time_s": a["step_time_s"]}
                                  for m, a in zip(r["metrics"], r["metrics_again"])]
    assert differing_leaves(r["state_after"], r["state_after_restore"]) == []
    assert differing_leaves(r["state_after"], r["state_after_load"]) == []
    # the fresh trainer: the saved state exactly (RNG too: same world), then the same steps
    assert differing_leaves(fresh["loaded"], r["snap"]) == []
    _replays({**fresh, "after": r["after"]}, "after_resume")
    assert differing_leaves(fresh["state_after_resume"], r["state_after"]) == []


@pytest.mark.slow
@pytest.mark.parametrize("dist", [True, False], ids=["distributed-optimizer", "plain-optimizer"])
def test_snapshot_and_checkpoints_restore_exactly_dp2(tmp_path, dist):
    """Weights, Adam state, RNG and counters at DP=2: a snapshot restore, an async
    checkpoint (written while training continued) loaded into the same trainer, and the
    same checkpoint loaded into a fresh trainer all replay the later steps bit-exactly and
    end in bit-identical states; a snapshot from before the first step replays the first
    steps. The distributed optimizer's Adam state is really split over the two ranks.
    The restores go through the ranks' host snapshot files (a run on one node), which hold
    exactly `snapshot()`'s state and restore into a fresh process."""
    ck, host = tmp_path / "ck", tmp_path / "host"
    opts = {"tp": 1, "steps": 0, "lr": 3e-4, "micro_batch_tokens": 32, "distributed_optimizer": dist}
    run = spawn_trainers({**opts, "dp": 2, "steps": 2, "state_roundtrip": str(ck),
                          "ckpt_dir": str(tmp_path / "end"), "snap_file": str(tmp_path / "snap"),
                          "replay_from_start": True, "host_root": str(host)}, tmp_path / "run")
    fresh = spawn_trainers({**opts, "dp": 2, "resume_from": str(ck), "later": True,
                            "restore_from_host": str(host / "later")}, tmp_path / "fresh")
    for r, f in zip(run, fresh):
        assert r["sealed"] == [(str(ck), None)]
        assert r["steps_loaded"] == 2
        assert differing_leaves(r["host_snap"], r["snap"]) == []
        assert differing_leaves(f["restored_host"], r["snap"]) == []
        _restores_exactly(r, f)
    moments = [sum(v.numel() for k, v in r["snap"].items() if k.endswith("/exp_avg_sq"))
               for r in run]
    params = sum(v.numel() for k, v in run[0]["snap"].items() if k.startswith("/model/")
                 and hasattr(v, "numel") and "_extra_state" not in k)
    # distributed: each rank holds its half of the Adam state; plain: each holds all of it
    assert moments == ([params // 2, params - params // 2] if dist else [params, params]), (moments, params)
    if dist:
        _distributed_optimizer_reshards(run, tmp_path, opts)


def _distributed_optimizer_reshards(run: list[dict], tmp_path, opts: dict) -> None:
    """A DP=2 distributed-optimizer checkpoint loads at DP=1 (weights and the whole Adam
    state) and, saved again there, back at DP=2 into the state the DP=2 run saved; at TP=2
    its optimizer state is refused with the reason and its weights load. A fresh DP=2
    trainer (a restarted actor) restores the run's snapshot exactly."""
    dp1 = spawn_trainers({**opts, "dp": 1, "resume_from": str(tmp_path / "ck"),
                          "resave": str(tmp_path / "ck-dp1")}, tmp_path / "dp1")[0]
    model = {k: v for k, v in run[0]["snap"].items() if k.startswith("/model/")}
    assert differing_leaves({k: dp1["loaded"][k] for k in model}, model) == []
    assert dp1["loaded"]["/steps"] == 2
    back = spawn_trainers({**opts, "dp": 2, "restore_from": str(tmp_path / "snap"),
                           "resume_from": str(tmp_path / "ck-dp1")}, tmp_path / "back")
    for r, b in zip(run, back):
        assert differing_leaves(b["restored"], r["snap"]) == []
        # RNG streams restart at another world size; everything else round-trips exactly
        assert differing_leaves(b["loaded"], r["snap"], skip="/rng/") == []
    tp2 = spawn_trainers({**opts, "tp": 2, "dp": 1, "load_ckpt": str(tmp_path / "end")},
                         tmp_path / "tp2")
    for r in tp2:
        assert "saved at TP=1 PP=1, which loads only at that TP and PP" in r["load_error"]
        for k, v in run[0]["ckpt_hf"].items():
            assert torch.equal(r["loaded_hf"][k], v), k


def test_optimizer_state_layout_errors():
    from yatt.exec.trainer_state import _layout_error
    dist = {"steps": 3, "world": 2, "tp": 1, "pp": 1, "distributed_optimizer": True}
    assert _layout_error(dist, True, 1, 1) is None
    assert "TP=1 PP=1" in _layout_error(dist, True, 2, 1) and "not TP=2 PP=1" in _layout_error(dist, True, 2, 1)
    assert "not TP=1 PP=2" in _layout_error(dist, True, 1, 2)
    assert "distributed_optimizer: true" in _layout_error(dist, False, 1, 1)
    plain = {**dist, "distributed_optimizer": False}
    assert _layout_error(plain, False, 2, 2) is None            # the plain state reshards
    assert "distributed_optimizer: false" in _layout_error(plain, True, 1, 1)
    assert _layout_error({"steps": 3, "world": 2}, True, 2, 1) is None   # older checkpoints


@pytest.mark.gpu
def test_cuda_trainer_matches_cpu(tmp_path):
    """The same batch and steps on CUDA (NCCL) and on CPU (gloo): the executor's trainer
    must compute the same thing on a GPU (fp32; TF32 is off by default for matmuls)."""
    opts = {"tp": 1, "dp": 1, "steps": 3, "lr": 3e-4, "save_hf": True, "micro_batch_tokens": 32}
    cpu = spawn_trainers(opts, tmp_path / "cpu")[0]
    gpu = spawn_trainers({**opts, "device": "cuda"}, tmp_path / "cuda")[0]
    b = make_batch(0)
    tol = logprob_tol(load_spec(), max(len(x) for x in b.input_ids),
                      max(abs(x) for r in cpu["logprobs0"] for x in r))
    for a, g in zip(cpu["logprobs0"], gpu["logprobs0"]):
        assert g == pytest.approx(a, abs=tol)
    _assert_same_training(gpu, cpu, b, lr=3e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("dist", [True, False], ids=["distributed-optimizer", "plain-optimizer"])
def test_cuda_bf16_trainer_learns_keeps_fp32_state_and_restores_exactly(tmp_path, dist, monkeypatch):
    """`dtype: bfloat16` on CUDA (what a GPU job trains): bf16 weights with fp32 main
    parameters and Adam state. Its loss falls on a repeated batch, its weights stay within
    bf16 rounding plus what Adam can move them of an fp32 run's, and a snapshot restore, an
    async checkpoint loaded back, and that checkpoint in a fresh trainer replay the later
    steps bit-exactly, as on CPU (the fp32 main parameters are part of the saved state)."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")   # deterministic cuBLAS replays
    lr, steps, ck = 1e-3, 3, tmp_path / "ck"
    opts = {"tp": 1, "dp": 1, "lr": lr, "micro_batch_tokens": 32, "device": "cuda",
            "distributed_optimizer": dist, "save_hf": True}
    bf = spawn_trainers({**opts, "dtype": "bfloat16", "steps": steps, "state_roundtrip": str(ck),
                         "replay_from_start": True}, tmp_path / "bf16")[0]
    fp = spawn_trainers({**opts, "steps": steps}, tmp_path / "fp32")[0]
    fresh = spawn_trainers({**opts, "dtype": "bfloat16", "steps": 0, "resume_from": str(ck),
                            "later": True}, tmp_path / "fresh")[0]
    assert bf["param_dtypes"] == ["torch.bfloat16"] and fp["param_dtypes"] == ["torch.float32"]
    params = sum(v.numel() for v in fp["hf"].values())
    fp32_state = sum(v.numel() for k, v in bf["snap"].items() if k.startswith("/optimizer/")
                     and hasattr(v, "dtype") and v.dtype == torch.float32)
    assert fp32_state >= 3 * params, (fp32_state, params)   # main params + both moments
    losses = [m["loss"] for m in bf["metrics"]]
    assert losses[-1] < losses[0], losses                   # it learns the repeated batch
    from safetensors.torch import load_file
    init = load_file(str(built_model(load_spec()) / "model.safetensors"))
    for name, w in fp["hf"].items():
        got, w0 = bf["hf"][name].cpu().float(), init[name].float()
        tol = torch.tensor([bf16_weight_tol(lr, steps, a, b)
                            for a, b in zip(w0.flatten().tolist(), w.flatten().tolist())])
        diff = (got - w.float()).abs().flatten()
        assert bool((diff <= tol).all()), (name, (diff - tol).max().item())
    _restores_exactly(bf, fresh)
