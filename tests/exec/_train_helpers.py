"""Shared helpers for the trainer / conversion / shim tests (tiny specs, built models, ports)."""
from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from yatt.core.config import read_yaml  # noqa: E402
from yatt.core.schema import from_dict  # noqa: E402
from yatt.core.specs import ModelSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "_artifacts" / "exec_train"


def load_spec(name: str = "tiny-actor") -> ModelSpec:
    return from_dict(ModelSpec, read_yaml(ROOT / "configs" / "model" / f"{name}.yaml"))


def llama_spec() -> ModelSpec:
    """Untied, bias-free, GQA variant used to exercise the Llama path."""
    return dataclasses.replace(load_spec(), name="tiny-llama", qkv_bias=False,
                               tied_embeddings=False)


def built_model(spec: ModelSpec, arch: str = "qwen2", seed: int = 0) -> Path:
    """Build (once, cached under tests/_artifacts) an HF checkpoint for spec."""
    from yatt.exec.hf_model import build_hf_model
    return build_hf_model(spec, ARTIFACTS / f"{spec.name}-{arch}-s{seed}", seed=seed, arch=arch)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------- trainer scenarios
def make_batch(dp_rank: int = 0, n: int = 6, seed: int = 0):
    """A fixed, ragged GRPO batch (deterministic per dp_rank)."""
    import random

    from yatt.exec.trainer import TrainBatch
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

    opts: tp, dp, steps, arch, distributed_optimizer, micro_batch_tokens, same_data (bool),
    save_hf (bool), kl (bool: add ref logprobs = initial logprobs).
    """
    import dataclasses as dc

    import torch
    torch.set_num_threads(1)
    from megatron.core import parallel_state as ps

    from yatt.exec.trainer import MegatronTrainer
    spec = load_spec() if opts.get("arch", "qwen2") == "qwen2" else llama_spec()
    path = built_model(spec, opts.get("arch", "qwen2"))
    tr = MegatronTrainer(spec, str(path), tp=opts["tp"], dp=opts["dp"], rank=rank,
                         master_addr="127.0.0.1", master_port=port, lr=opts.get("lr", 1e-3),
                         distributed_optimizer=opts.get("distributed_optimizer", False),
                         micro_batch_tokens=opts.get("micro_batch_tokens", 4096),
                         kl_coef=opts.get("kl_coef", 0.0), entropy_coef=opts.get("entropy_coef", 0.0))
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
    batch = dc.replace(batch, old_logprobs=tuple(tuple(r) for r in lp0))  # fixed behaviour policy
    if opts.get("kl_coef"):
        batch = dc.replace(batch, ref_logprobs=tuple(tuple(x - 0.01 for x in r) for r in lp0))
    metrics = [tr.train_step(batch) for _ in range(opts.get("steps", 2))]
    res = {"metrics": metrics, "logprobs0": lp0, "checksum": tr.param_checksum(),
           "dp_rank": dp_rank, "tp_rank": ps.get_tensor_model_parallel_rank()}
    if opts.get("save_hf"):
        res["hf"] = tr.hf_state_dict()
    tr.shutdown()
    torch.save(res, os.path.join(out_dir, f"rank{rank}.pt"))


def spawn_trainers(opts: dict, out_dir) -> list[dict]:
    """Run run_trainer on tp*dp spawned processes; return each rank's result."""
    import torch
    import torch.multiprocessing as mp
    world = opts["tp"] * opts["dp"]
    mp.spawn(run_trainer, args=(world, free_port(), opts, str(out_dir)), nprocs=world, join=True)
    return [torch.load(Path(out_dir) / f"rank{r}.pt", weights_only=False) for r in range(world)]
