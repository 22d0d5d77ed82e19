"""Trainer and reference workers: the Ray-actor side of training and reference log-probs.

Why: `trainer.MegatronTrainer` is one rank with a collective contract (every rank calls
every method in order). This wrapper adds what the executor needs around it: data is
*staged* by the controllers straight into each rank (every rank of a model replica gets
the replica's whole share; it never passes through the driver), then one `train_step`
consumes it in a deterministic order (by sample id), so both placement modes and any
number of controllers train on byte-identical batches. With `algo.old_logprobs:
recompute` the step runner calls `recompute_old_logprobs` first (its own trace phase).
The reference worker is a frozen copy of the initial policy (HF forward, fp32) used only
for per-token log-probs on the devices the plan gives to Role.REFERENCE.
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Optional

from yatt.core.balance import REF_BATCH_TOKENS, pack_padded
from yatt.core.jobspec import Dtype
from yatt.core.specs import AlgoSpec, CheckpointSpec, ModelSpec


@dataclass(frozen=True)
class TrainItem:
    sample_id: int
    input_ids: tuple[int, ...]
    prompt_len: int
    advantage: float
    ref_logprobs: Optional[tuple[float, ...]] = None
    behav_logprobs: Optional[tuple[float, ...]] = None   # async: the engine's, stale weights


@dataclass(frozen=True)
class TrainerArgs:
    """What every trainer rank is built from: the experiment's algorithm and checkpoint
    specs, whole, and this run's runtime facts."""

    spec: ModelSpec
    hf_path: str
    algo: AlgoSpec
    checkpoint: CheckpointSpec = CheckpointSpec()
    tp: int = 1
    dp: int = 1
    seed: int = 0
    device: str = "cpu"
    pp: int = 1
    pad_id: int = 0                 # the tokenizer's pad (padding is masked out of the loss)
    dtype: Dtype = Dtype.FLOAT32    # bfloat16: bf16 weights, fp32 main grads (GPU)


def free_port() -> tuple[str, int]:
    """This node's IP and a free TCP port (rank 0 hosts the process-group rendezvous)."""
    import ray

    with socket.socket() as s:
        s.bind(("", 0))
        return ray.util.get_node_ip_address(), s.getsockname()[1]


class TrainerWorker:
    """One Megatron rank in a Ray actor. Call `setup` on all ranks concurrently."""

    def __init__(self, args: TrainerArgs, rank: int):
        self.args, self.rank = args, rank
        self.trainer = None
        self._staged: list[TrainItem] = []
        self._old: Optional[tuple] = None     # old log-probs of the staged batch (recompute)

    def address(self) -> tuple[str, int]:
        return free_port()

    def ping(self) -> bool:
        """Liveness probe (fault recovery waits on it while Ray restarts the actor); True
        while this incarnation has not been set up (a fresh, restarted process)."""
        return self.trainer is None

    def setup(self, master_addr: str, master_port: int) -> float:
        from .trainer import MegatronTrainer

        a = self.args
        t0 = time.perf_counter()
        self.trainer = MegatronTrainer(a.spec, a.hf_path, a.algo, tp=a.tp, dp=a.dp, rank=self.rank,
                                       master_addr=master_addr, master_port=master_port,
                                       seed=a.seed, device=a.device, pp=a.pp, pad_id=a.pad_id,
                                       dtype=a.dtype)
        ck = a.checkpoint
        if ck.async_save and ck.any_trigger and not ck.writer.thread(a.device == "cpu"):
            # start megatron's forked writers' result queue at setup, not in the first save
            self.trainer.prewarm_async_checkpointing()
        return time.perf_counter() - t0

    def clear_staged(self) -> int:
        n, self._staged, self._old = len(self._staged), [], None
        return n

    # ---- state (supervisor.py) -------------------------------------------------------
    def snapshot(self) -> dict:
        return self.trainer.snapshot()

    def snapshot_host(self, root: str, generation: int):
        return self.trainer.snapshot_host(root, generation)

    def restore(self, snap) -> None:
        self._staged, self._old = [], None
        self.trainer.restore(snap)

    def save_checkpoint(self, ckpt_dir: str, async_save: bool) -> list[tuple[str, Optional[str]]]:
        """Finalise the earlier asynchronous writes (collective; the previous one had a whole
        step to finish), then start this one. Returns what `poll_checkpoints` does for the
        earlier writes: the driver sends this call without waiting, so the finalisation runs
        while the next step's rollout does, not between steps. A synchronous save on the
        thread writer is that writer's save waited for here, so it is finalised like the
        others: a write that fails (a full disk) is returned with its reason on every rank
        instead of raised on one."""
        done = self.trainer.poll_checkpoints(blocking=True)
        thread = self.args.checkpoint.writer.thread(self.args.device == "cpu")
        self.trainer.save_checkpoint(ckpt_dir, async_save=async_save or thread,
                                     thread_writer=thread)
        if thread and not async_save:
            done += self.trainer.poll_checkpoints(blocking=True)
        return done

    def poll_checkpoints(self, blocking: bool) -> list[tuple[str, Optional[str]]]:
        """(directory, None) per finalised write, (directory, why) per failed one."""
        return self.trainer.poll_checkpoints(blocking)

    def load_checkpoint(self, ckpt_dir: str) -> int:
        self.trainer.load_checkpoint(ckpt_dir, optimizer=True)
        return self.trainer.steps

    def stage(self, items: list[TrainItem]) -> int:
        self._staged.extend(items)
        self._old = None
        return len(self._staged)

    def _items(self) -> list[TrainItem]:
        return sorted(self._staged, key=lambda x: x.sample_id)

    def recompute_old_logprobs(self) -> dict:
        """The old-log-prob pass (`algo.old_logprobs: recompute`): one forward of the current
        weights over everything staged; the next `train_step` uses these as the PPO ratio's
        old log-probs. A collective, like `train_step`."""
        items = self._items()
        t0 = time.perf_counter()
        lp = self.trainer.logprobs([x.input_ids for x in items], [x.prompt_len for x in items])
        self._old = tuple(tuple(r) for r in lp)
        return {"seconds": time.perf_counter() - t0, "sequences": len(items)}

    def train_step(self, lr: Optional[float] = None) -> dict:
        """Train on everything staged (possibly nothing: dynamic sampling can leave a rank
        empty; it still joins the collectives) at learning rate `lr` (None: unchanged),
        with the old log-probs of `recompute_old_logprobs` if it ran on this batch."""
        from .train_batch import TrainBatch

        items = self._items()
        old, self._staged, self._old = self._old, [], None
        ref = None
        if items and all(x.ref_logprobs is not None for x in items):
            ref = tuple(x.ref_logprobs for x in items)
        behav = None
        if items and all(x.behav_logprobs is not None for x in items):
            behav = tuple(x.behav_logprobs for x in items)
        batch = TrainBatch(tuple(x.input_ids for x in items), tuple(x.prompt_len for x in items),
                           tuple(x.advantage for x in items), old, ref, behav)
        t0 = time.perf_counter()
        out = dict(self.trainer.train_step(batch, lr))
        out["seconds"] = time.perf_counter() - t0
        out["sequences"] = len(items)
        return out

    def logprobs(self, input_ids: list, prompt_lens: list) -> list:
        return self.trainer.logprobs(input_ids, prompt_lens)

    def hf_state_dict(self) -> dict:
        return self.trainer.hf_state_dict()

    def node_id(self) -> str:
        import ray
        return ray.get_runtime_context().get_node_id()

    def shutdown(self) -> None:
        if self.trainer is not None:
            self.trainer.shutdown()
            self.trainer = None


class ReferenceWorker:
    """Frozen initial policy, HF forward in fp32; per-token log-probs of responses."""

    def __init__(self, hf_path: str, device: str = "cpu", index: int = 0):
        import torch
        from transformers import AutoModelForCausalLM

        from . import faults

        torch.set_num_threads(1) if device == "cpu" else None
        self.device = device
        self.model = AutoModelForCausalLM.from_pretrained(hf_path, dtype=torch.float32).to(device)
        self.model.eval()
        self.fault = faults.hook("reference", index)

    def ping(self) -> bool:
        return True

    def logprobs(self, input_ids: list, prompt_lens: list,
                 max_tokens: int = REF_BATCH_TOKENS) -> list:
        """Per-token log-probs of each sequence's response tokens, in right-padded batches of
        at most `max_tokens` padded tokens, one forward each (causal attention: a sequence
        never sees its own padding, so values match per-sequence forwards to float
        rounding; 2-4x faster than one forward per sequence on CPU)."""
        import torch

        if self.fault is not None:
            self.fault.tick()
            self.fault.maybe_exit()      # injected crash (tests)
            self.fault.maybe_stall()     # injected hang: its node is taken away (tests)
        out: list = [None] * len(input_ids)
        groups = pack_padded([len(x) for x in input_ids], max_tokens)
        with torch.no_grad():
            for g in groups:
                width = max(len(input_ids[i]) for i in g)
                x = torch.zeros(len(g), width, dtype=torch.long)
                att = torch.zeros(len(g), width, dtype=torch.long)
                for j, i in enumerate(g):
                    x[j, :len(input_ids[i])] = torch.tensor(list(input_ids[i]))
                    att[j, :len(input_ids[i])] = 1
                x, att = x.to(self.device), att.to(self.device)
                lp = self.model(input_ids=x, attention_mask=att).logits.float().log_softmax(-1)
                tok = lp[:, :-1].gather(2, x[:, 1:, None])[..., 0]
                for j, i in enumerate(g):
                    out[i] = tok[j, prompt_lens[i] - 1:len(input_ids[i]) - 1].tolist()
        return out
