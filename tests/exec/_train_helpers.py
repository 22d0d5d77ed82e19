"""Shared helpers for the trainer / conversion / shim tests (tiny specs, built models, ports)."""
from __future__ import annotations

import dataclasses
import os
import socket
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from yatt.core.config import read_yaml  # noqa: E402
from yatt.core.schema import from_dict  # noqa: E402
from yatt.core.specs import AlgoSpec, ModelSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "_artifacts" / "exec_train"


def load_spec(name: str = "tiny-actor") -> ModelSpec:
    return from_dict(ModelSpec, read_yaml(ROOT / "configs" / "model" / f"{name}.yaml"))


def llama_spec() -> ModelSpec:
    """Untied, bias-free, GQA variant used to exercise the Llama path."""
    return dataclasses.replace(load_spec(), name="tiny-llama", qkv_bias=False,
                               tied_embeddings=False)


def qwen3_spec() -> ModelSpec:
    """Qwen3's layout: bias-free attention with per-head q/k RMSNorm, untied."""
    return dataclasses.replace(llama_spec(), name="tiny-qwen3")


# Llama 3.1's context extension (its published values; Megatron implements exactly these)
LLAMA31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def built_model(spec: ModelSpec, arch: str = "qwen2", seed: int = 0,
                rope_scaling: dict | None = None) -> Path:
    """Build (once, cached under tests/_artifacts) an HF checkpoint for spec."""
    from yatt.exec.hf_model import build_hf_model
    tag = "-llama3rope" if rope_scaling else ""
    return build_hf_model(spec, ARTIFACTS / f"{spec.name}-{arch}{tag}-s{seed}", seed=seed,
                          arch=arch, rope_scaling=rope_scaling)


def logit_cases() -> list[tuple[str, str, ModelSpec, dict | None]]:
    """(label, arch, spec, rope scaling) of every architecture the trainer must mirror."""
    return [("qwen2", "qwen2", load_spec(), None), ("llama", "llama", llama_spec(), None),
            ("llama3.1", "llama", llama_spec(), LLAMA31_ROPE),
            ("qwen3", "qwen3", qwen3_spec(), None)]


def plain_algo(**kw) -> AlgoSpec:
    """The trainer tests' algorithm: PPO-clip without KL or entropy terms, one epoch,
    4096-token micro-batches, a replicated optimizer; `kw` overrides fields."""
    base = dict(lr=1e-3, kl_coef=0.0, entropy_coef=0.0, micro_batch_tokens=4096,
                distributed_optimizer=False)
    return AlgoSpec(**{**base, **kw})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------- trainer scenarios
def make_batch(dp_rank: int = 0, n: int = 6, seed: int = 0):
    """A fixed, ragged GRPO batch (deterministic per dp_rank)."""
    import random

    from yatt.exec.train_batch import TrainBatch
    rng = random.Random(1000 * seed + dp_rank)
    ids, plens, adv = [], [], []
    for _ in range(n):
        p, r = rng.randint(2, 6), rng.randint(3, 12)
        ids.append(tuple(rng.randint(3, 63) for _ in range(p + r)))
        plens.append(p)
        adv.append(rng.choice((-1.0, 1.0)) * rng.uniform(0.5, 1.5))
    return TrainBatch(tuple(ids), tuple(plens), tuple(adv))


def run_trainer(rank: int, world: int, port: int, opts: dict, out_dir: str) -> None:
    """One rank of a multi-process trainer scenario; writes rank{rank}.pt to out_dir.

    opts: tp, dp, pp (default 1), steps, arch, device, dtype (a `Dtype` value; bfloat16
    trains bf16 weights on CUDA), distributed_optimizer,
    micro_batch_tokens, mini_batches, old_logprobs, same_data (bool), save_hf (bool),
    kl (bool: add ref logprobs = initial logprobs), fixed_old (default True: the batch
    carries the initial log-probs as its old log-probs).
    """
    import dataclasses as dc

    import torch
    torch.set_num_threads(1)
    from megatron.core import parallel_state as ps

    from yatt.core.errors import InputError
    from yatt.core.jobspec import Dtype
    from yatt.exec import host_snapshot
    from yatt.exec.trainer import MegatronTrainer
    spec = load_spec() if opts.get("arch", "qwen2") == "qwen2" else llama_spec()
    path = built_model(spec, opts.get("arch", "qwen2"))
    algo = plain_algo(**{k: opts[k] for k in ("lr", "distributed_optimizer",
                                               "micro_batch_tokens", "kl_coef", "entropy_coef",
                                               "mini_batches", "old_logprobs", "ppo_epochs")
                         if k in opts})
    tr = MegatronTrainer(spec, str(path), algo, tp=opts["tp"], dp=opts["dp"], rank=rank,
                         master_addr="127.0.0.1", master_port=port,
                         device=opts.get("device", "cpu"), pp=opts.get("pp", 1),
                         dtype=Dtype(opts.get("dtype", "float32")))
    dp_rank = ps.get_data_parallel_rank()
    if opts.get("split_of") is not None:      # this DP rank's half of a full batch
        full = make_batch(0, n=opts["split_of"])
        k = len(full.input_ids) // opts["dp"]
        sl = slice(dp_rank * k, (dp_rank + 1) * k)
        batch = dc.replace(full, input_ids=full.input_ids[sl], prompt_lens=full.prompt_lens[sl],
                           advantages=full.advantages[sl])
    else:
        batch = make_batch(0 if opts.get("same_data") else dp_rank)
    lp0 = tr.logprobs(batch.input_ids, batch.prompt_lens)
    if opts.get("fixed_old", True):   # a fixed behaviour policy
        batch = dc.replace(batch, old_logprobs=tuple(tuple(r) for r in lp0))
    if opts.get("kl_coef"):
        batch = dc.replace(batch, ref_logprobs=tuple(tuple(x - 0.01 for x in r) for r in lp0))
    host = opts.get("host_root")   # snapshots through host files (host_snapshot.py)
    if host:
        for d in (f"{host}/first", f"{host}/later"):
            os.makedirs(d, exist_ok=True)
    first = None
    if opts.get("replay_from_start"):   # before any step
        first = tr.snapshot_host(f"{host}/first", 0) if host else tr.snapshot()
    metrics = [tr.train_step(batch) for _ in range(opts.get("steps", 2))]
    res = {"metrics": metrics, "logprobs0": lp0, "checksum": tr.param_checksum(),
           "dp_rank": dp_rank, "tp_rank": ps.get_tensor_model_parallel_rank(),
           "cuda": torch.cuda.is_available(), "pp_rank": ps.get_pipeline_model_parallel_rank()}
    if opts.get("save_hf"):
        res["hf"] = tr.hf_state_dict()
        res["param_dtypes"] = sorted({str(p.dtype) for p in tr.model.parameters()})
        res["logprobs_after"] = tr.logprobs(batch.input_ids, batch.prompt_lens)
    if opts.get("nan_step"):
        bad = dc.replace(batch, advantages=(float("nan"),) * len(batch.advantages))
        res["nan_metrics"] = tr.train_step(bad)
        res["checksum_after_nan"] = tr.param_checksum()
    later = [make_batch(dp_rank, seed=s) for s in (1, 2)]
    if opts.get("state_roundtrip"):
        # snapshot + async checkpoint of the same state; three replays must agree exactly
        snap = tr.snapshot()
        res["snap"] = state_leaves(snap)
        if host:   # the host file holds the same state; the replays below restore from it
            hsnap = tr.snapshot_host(f"{host}/later", 1)
            res["host_snap"] = state_leaves(host_snapshot.read(hsnap, rank))
        if opts.get("snap_file"):
            torch.save(snap, f"{opts['snap_file']}{rank}")
        res["stall_s"] = tr.save_checkpoint(opts["state_roundtrip"], async_save=True,
                                            thread_writer=opts.get("thread_writer"))
        res["after"] = [tr.train_step(b) for b in later]          # overlaps the write
        res["state_after"] = state_leaves(tr.snapshot())
        res["sealed"] = tr.poll_checkpoints(blocking=True)
        tr.restore(hsnap if host else snap)
        res["after_restore"] = [tr.train_step(b) for b in later]
        res["state_after_restore"] = state_leaves(tr.snapshot())
        tr.load_checkpoint(opts["state_roundtrip"])
        res["steps_loaded"] = tr.steps
        res["after_load"] = [tr.train_step(b) for b in later]
        res["state_after_load"] = state_leaves(tr.snapshot())
    if opts.get("restore_from"):
        # a fresh trainer (like a restarted actor) restores another process's snapshot
        tr.restore(torch.load(f"{opts['restore_from']}{rank}", weights_only=False))
        res["restored"] = state_leaves(tr.snapshot())
    if opts.get("restore_from_host"):
        # a fresh trainer (a restarted actor) restores the host file another process wrote
        tr.restore(host_snapshot.HostSnapshot(opts["restore_from_host"], 1))
        res["restored_host"] = state_leaves(tr.snapshot())
    if opts.get("resume_from"):
        # a fresh trainer loads a checkpoint, then (`later`) replays the later batches
        t0 = time.perf_counter()
        tr.load_checkpoint(opts["resume_from"])
        res["load_s"] = time.perf_counter() - t0
        res["loaded"] = state_leaves(tr.snapshot())
        if opts.get("resave"):
            tr.save_checkpoint(opts["resave"])
        if opts.get("later"):
            res["after_resume"] = [tr.train_step(b) for b in later]
            res["state_after_resume"] = state_leaves(tr.snapshot())
    if opts.get("ckpt_dir"):
        tr.save_checkpoint(opts["ckpt_dir"])
        res["ckpt_hf"] = tr.hf_state_dict()
    if opts.get("load_ckpt"):
        try:
            tr.load_checkpoint(opts["load_ckpt"])
        except InputError as e:   # optimizer state this trainer cannot take: weights only
            res["load_error"] = str(e)
            tr.load_checkpoint(opts["load_ckpt"], optimizer=False)
        res["loaded_hf"] = tr.hf_state_dict()
    if first is not None:   # back to the untrained state, then the same steps again
        tr.restore(first)
        res["metrics_again"] = [tr.train_step(batch) for _ in range(opts.get("steps", 2))]
    res["mode_outside_calls"] = device_mode_active()
    tr.shutdown()
    torch.save(res, os.path.join(out_dir, f"rank{rank}.pt"))


def device_mode_active() -> bool:
    """Whether the shim's device mode is on this thread's torch function mode stack."""
    import torch

    from yatt.exec import megatron_shim
    return any(isinstance(m, megatron_shim.CudaToCpuMode)
               for m in torch.overrides._get_current_function_mode_stack())


def state_leaves(x, path: str = "") -> dict:
    """A trainer snapshot flattened to {path: leaf} (tensors, numbers, strings), so two
    states compare leaf by leaf."""
    if isinstance(x, dict):
        return {k: v for key, val in x.items() for k, v in state_leaves(val, f"{path}/{key}").items()}
    if isinstance(x, (list, tuple)):
        return {k: v for i, val in enumerate(x) for k, v in state_leaves(val, f"{path}/{i}").items()}
    return {path: x}


def differing_leaves(a: dict, b: dict, skip: str = "\0") -> list[str]:
    """Paths where two `state_leaves` differ (bit-exact tensors, equal plain values);
    paths containing `skip` are left out."""
    keys = {k for k in a.keys() | b.keys() if skip not in k}
    return sorted(k for k in keys
                  if k not in a or k not in b or type(a[k]) is not type(b[k])
                  or not (torch_equal(a[k], b[k]) if hasattr(a[k], "dtype") else a[k] == b[k]))


def torch_equal(a, b) -> bool:
    import torch
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def _spawn_on_free_port(fn, world: int, opts: dict, out_dir, tries: int = 3) -> None:
    """mp.spawn `fn` with a fresh rendezvous port; again (up to `tries`) when another
    process on this shared box took the port between `free_port()` and rank 0's bind."""
    import torch.multiprocessing as mp
    for attempt in range(tries):
        try:
            mp.spawn(fn, args=(world, free_port(), opts, str(out_dir)), nprocs=world, join=True)
            return
        except mp.ProcessRaisedException as e:
            if "EADDRINUSE" not in str(e) or attempt == tries - 1:
                raise


def spawn_trainers(opts: dict, out_dir) -> list[dict]:
    """Run run_trainer on tp*pp*dp spawned processes; return each rank's result."""
    import torch
    world = opts["tp"] * opts.get("pp", 1) * opts["dp"]
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    _spawn_on_free_port(run_trainer, world, opts, out_dir)
    return [torch.load(Path(out_dir) / f"rank{r}.pt", weights_only=False) for r in range(world)]


def run_logits(rank: int, world: int, port: int, opts: dict, out_dir: str) -> None:
    """Megatron logits (gathered over TP) for both archs on fixed ids; rank 0 saves them."""
    import torch
    torch.set_num_threads(1)
    from yatt.exec import megatron_shim
    megatron_shim.enter()
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel

    from yatt.exec.hf_convert import load_into_megatron
    from yatt.exec.megatron_model import HfMeta, build_gpt_model
    tp = world
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                         rank=rank, world_size=world)
    ps.initialize_model_parallel(tp, 1)
    tensor_parallel.model_parallel_cuda_manual_seed(0, inference_rng_tracker=True)
    ids = logit_ids()
    pos = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
    out = {}
    for label, arch, spec, rope in logit_cases():
        path = built_model(spec, arch, rope_scaling=rope)
        meta = HfMeta.read(path)
        model = build_gpt_model(spec, meta, tp)
        load_into_megatron(model, path, spec, meta.arch, tp, ps.get_tensor_model_parallel_rank())
        with torch.no_grad():
            lg = tensor_parallel.gather_from_tensor_model_parallel_region(model(ids, pos, None))
        out[label] = lg
    ps.destroy_model_parallel()
    torch.distributed.destroy_process_group()
    if rank == 0:
        torch.save(out, os.path.join(out_dir, "logits.pt"))


def logit_ids():
    import torch
    g = torch.Generator().manual_seed(0)
    return torch.randint(3, 63, (3, 21), generator=g)


def spawn(fn, world: int, opts: dict, out_dir) -> None:
    _spawn_on_free_port(fn, world, opts, out_dir)


def hf_logprobs(path, input_ids, prompt_lens):
    """Reference per-response-token log-probs from `transformers` (one sequence at a time)."""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    out = []
    with torch.no_grad():
        for ids, p in zip(input_ids, prompt_lens):
            x = torch.tensor([ids])
            lp = torch.log_softmax(model(x).logits[0].float(), -1)
            out.append([lp[t - 1, ids[t]].item() for t in range(p, len(ids))])
    return out


def run_thread_writer(rank: int, world: int, port: int, opts: dict, out_dir: str) -> None:
    """Two asynchronous saves through ckpt_writer.ThreadCallsQueue on `world` gloo ranks: one
    whose tensors change right after the hand-off (the write must hold the state as saved),
    loaded back; one whose rank-0 write meets a full disk. Saves what each rank saw."""
    import contextlib
    import os
    import threading

    import torch
    torch.set_num_threads(1)
    from yatt.exec import faults, megatron_shim
    megatron_shim.enter()
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.mapping import ShardedTensor
    from megatron.core.dist_checkpointing.strategies import filesystem_async
    from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy
    from torch.distributed.checkpoint.api import CheckpointException

    from yatt.exec.ckpt_writer import ThreadCallsQueue
    from yatt.exec.trainer_state import _write_failure
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                         rank=rank, world_size=world)
    forks = []
    real_fork = os.fork
    os.fork = lambda: forks.append(1) or real_fork()
    res: dict = {}
    w = torch.arange(4, dtype=torch.float32) + 10 * rank

    def sd(t):
        return {"w": ShardedTensor.from_rank_offsets("w", t, (0, rank, world))}

    stepped = threading.Event()

    @contextlib.contextmanager
    def after_the_step():              # the writer starts only once the tensor has changed
        stepped.wait()
        yield

    q = ThreadCallsQueue()
    strategy = TorchDistSaveShardedStrategy("torch_dist", 1, thread_count=1)
    good = Path(out_dir) / "good"
    good.mkdir(exist_ok=True)
    q.around = after_the_step()
    q.schedule_async_request(dist_checkpointing.save(sd(w), str(good), sharded_strategy=strategy,
                                                     async_sharded_save=True))
    w.add_(100.0)                      # the next training step changes the live tensor
    stepped.set()
    res["finalised"] = q.maybe_finalize_async_calls(blocking=True)
    loaded = dist_checkpointing.load(sd(torch.zeros(4)), str(good))
    res["loaded"] = loaded["w"].tolist()
    bad = Path(out_dir) / "full"
    bad.mkdir(exist_ok=True)
    if rank == 0:
        q.around = faults.full_disk(filesystem_async, "_write_item")
    q.schedule_async_request(dist_checkpointing.save(sd(w), str(bad), sharded_strategy=strategy,
                                                     async_sharded_save=True))
    try:
        q.maybe_finalize_async_calls(blocking=True)
        res["full_disk"] = None
    except CheckpointException as e:
        res["full_disk"] = _write_failure(e)
    res["forks"] = len(forks)
    res["write_item_restored"] = filesystem_async._write_item.__module__ != faults.__name__
    os.fork = real_fork
    torch.save(res, Path(out_dir) / f"rank{rank}.pt")
    torch.distributed.destroy_process_group()
