"""A trainer rank's complete state: in-memory snapshots and dist_checkpointing checkpoints.

Why: fault recovery, NaN rollback and resume all need the *whole* training state of a
rank (weights, optimizer, RNG streams, step counters), and the three uses must agree on
what that is. This mixin holds it apart from the training math in `trainer.py`;
`MegatronTrainer` provides `model`, `optimizer`, `ddp`, `device`, `rank`, `world`, `steps`,
`nonfinite_steps` and the `_ckpt_*` fields it uses.

With the distributed optimizer (`algo.distributed_optimizer`) a rank holds only its DP
shard of the Adam state, which megatron's `state_dict()` leaves out (it covers the step
count and hyper-parameters): snapshots add the shard (`_optimizer_snapshot`), checkpoints
use megatron's `dp_reshardable` format (see `DIST_OPT_SHARDING`), and a fresh trainer
first gets Adam state to load into (`_init_optimizer_state`).

Checkpoints hold tensors and plain data only (the RNG states are stored as tensors and
tuples), so every file loads with `weights_only=True` and no pickled code ever runs on
resume (`safe_load`).
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Optional

import torch

from . import faults, host_snapshot, megatron_shim, nodes, safe_load


# Distributed optimizer checkpoint format: every rank writes its own shard of the Adam
# state, no gather; the state reloads at another DP size, but only at the saving TP and PP
# sizes (the weights load at any). megatron-core 0.16.1's other formats fail here:
# `fully_sharded_model_space` (its default) refuses to save ("flattened_range is not
# supported"), and a `fully_reshardable` load asks torch Adam's per-parameter `step` of
# the checkpoint, which that format leaves out (KeyError: 'step').
DIST_OPT_SHARDING = "dp_reshardable"


class TrainerState:
    """Snapshot/restore and checkpoint save/poll/load of one trainer rank (see module doc)."""

    def _rng_state(self) -> dict:
        import random

        import numpy as np
        from megatron.core import tensor_parallel
        name, keys, pos, has_gauss, gauss = np.random.get_state()
        # numpy's state as a tensor and plain numbers: loadable with weights_only=True
        st = {"torch": torch.get_rng_state(), "python": random.getstate(),
              "numpy": (str(name), torch.from_numpy(keys.astype(np.int64)), int(pos),
                        int(has_gauss), float(gauss))}
        try:
            st["tracker"] = tensor_parallel.get_cuda_rng_tracker().get_states()
        except Exception:  # no tracker states on this build: nothing else draws from it
            pass
        if torch.cuda.is_available() and self.device.type == "cuda":
            st["cuda"] = torch.cuda.get_rng_state()
        return st

    def _set_rng_state(self, st: dict) -> None:
        import random

        import numpy as np
        from megatron.core import tensor_parallel
        torch.set_rng_state(st["torch"])
        random.setstate(_tuples(st["python"]))
        name, keys, pos, has_gauss, gauss = st["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.int64).astype(np.uint32), pos,
                             has_gauss, gauss))
        if "tracker" in st:
            tensor_parallel.get_cuda_rng_tracker().set_states(st["tracker"])
        if "cuda" in st and torch.cuda.is_available():
            torch.cuda.set_rng_state(st["cuda"])

    @megatron_shim.on_any_thread
    def snapshot(self) -> dict:
        """This rank's complete training state in host memory (weights, optimizer, RNG,
        counters): what fault recovery and NaN rollback restore."""
        return self._state(copy_out=True)

    @megatron_shim.on_any_thread
    def snapshot_host(self, root: str, generation: int) -> host_snapshot.HostSnapshot:
        """`snapshot()` written straight from the live tensors into this rank's host file
        (host_snapshot.py), with no copy in this process; the token `restore` takes."""
        host_snapshot.write(root, self.rank, generation, self._state(copy_out=False))
        return host_snapshot.HostSnapshot(root, generation)

    def _state(self, copy_out: bool) -> dict:
        """The state `snapshot` holds; `copy_out=False`: views of the live tensors, to be
        copied out before the next update."""
        import copy
        return {"model": {k: ((_host_copy(v) if copy_out else v.detach()) if torch.is_tensor(v)
                              else copy.deepcopy(v))
                          for k, v in self.model.state_dict().items()},
                "optimizer": self._optimizer_snapshot(copy_out),
                "rng": self._rng_state(), "steps": self.steps,
                "nonfinite_steps": self.nonfinite_steps}

    @megatron_shim.on_any_thread
    @torch.no_grad()   # fp32 main parameters are views of the model's leaf parameters
    def restore(self, snap) -> None:
        """Put this rank back to a `snapshot()` or a `snapshot_host()` token (not a
        collective); `snap` is left unchanged."""
        import copy
        if isinstance(snap, host_snapshot.HostSnapshot):
            snap = host_snapshot.read(snap, self.rank)
        self.model.load_state_dict(snap["model"], strict=True)
        if self._dist_optimizers():
            for opt, st in zip(self._dist_optimizers(), snap["optimizer"]):
                if st is None:   # snapshotted before its first step: no Adam state
                    opt.optimizer.state.clear()
                    opt.reload_model_params()   # main parameters from the restored weights
                else:
                    # copies into this rank's Adam state and main parameters (the
                    # snapshot stays unaliased, so it can be restored again)
                    opt.load_state_dict(st)
            self._set_adam_steps()
        else:
            # torch's `load_state_dict` keeps the given tensors as the live Adam state: a copy
            # leaves the snapshot (possibly an object-store buffer) as it was, for a later
            # restore of the same snapshot
            self.optimizer.load_state_dict(copy.deepcopy(snap["optimizer"]))
        self.optimizer.zero_grad()
        self.ddp.zero_grad_buffer()
        self._set_rng_state(snap["rng"])
        self.steps, self.nonfinite_steps = snap["steps"], snap["nonfinite_steps"]

    def _dist_optimizers(self) -> list:
        """This rank's megatron DistributedOptimizers ([] with the plain optimizer)."""
        from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
        parts = getattr(self.optimizer, "chained_optimizers", [self.optimizer])
        dist = [o for o in parts if isinstance(o, DistributedOptimizer)]
        return dist if len(dist) == len(parts) else []

    def _optimizer_snapshot(self, copy_out: bool):
        """The optimizer's whole state, copied to host memory (`copy_out=False`: views of
        the live tensors). Plain optimizer: its state dict. Distributed optimizer: per
        DistributedOptimizer, its state dict plus this rank's shard of main parameters and
        Adam moments in megatron's in-memory `dp_reshardable` layout, which its
        `load_state_dict` takes back; None before its first step (no Adam state yet, and
        megatron's `state_dict()` needs one)."""
        import copy
        dist = self._dist_optimizers()
        if not dist:
            sd = self.optimizer.state_dict()
            return copy.deepcopy(sd) if copy_out else sd
        out: list = []
        for opt in dist:
            if not opt.optimizer.state:
                out.append(None)
                continue
            shard = opt.get_parameter_state_dp_reshardable()   # views of the live tensors
            for gbuf_idx in range(len(opt.gbuf_ranges)):
                for buckets in shard[gbuf_idx].values():
                    for bucket in buckets:
                        for item in bucket:
                            item["padding"] = False   # `load_parameter_state_from_dp_reshardable` skips padding items
            out.append({**copy.deepcopy(opt.state_dict()),
                        "param_state": _host_copy(shard) if copy_out else shard,
                        "param_state_sharding_type": "dp_reshardable"})
        return out

    def _init_optimizer_state(self) -> None:
        """Give a distributed optimizer that has not stepped yet its Adam state, which its
        `sharded_state_dict(is_loading=True)` and `load_state_dict` copy into (megatron
        0.16.1's torch-Adam path asserts otherwise). One step of the inner torch optimizer
        on zero gradients allocates it, as megatron's own `fsdp_dtensor` load path does;
        with zero gradients Adam's update is exactly zero, and the load overwrites the
        state anyway."""
        for opt in self._dist_optimizers():
            inner = opt.optimizer
            if inner.state:
                continue
            for group in inner.param_groups:
                for p in group["params"]:
                    if p.numel():
                        p.grad = torch.zeros_like(p)
            inner.step()
            inner.zero_grad()

    def _set_adam_steps(self) -> None:
        """After a distributed optimizer's `load_state_dict`: every parameter's torch-Adam
        `step` from its param group's loaded one. megatron 0.16.1 leaves each parameter one
        shared `step` tensor (torch's Adam increments it in place, so it would advance once
        per parameter per update), and its `dp_reshardable` checkpoint load copies in the
        step value this rank held before loading (its per-parameter `step` is a
        non-persistent local object). FusedAdam (TE, Apex) keeps no per-parameter step."""
        for opt in self._dist_optimizers():
            inner = opt.optimizer
            for group in inner.param_groups:
                for p in group["params"]:
                    st = inner.state.get(p, {})
                    if torch.is_tensor(st.get("step")) and "step" in group:
                        st["step"] = torch.tensor(float(group["step"]), dtype=st["step"].dtype,
                                                  device=st["step"].device)

    def _sharded_state(self, loading: bool = False, rng: bool = True) -> dict:
        """Model + optimizer (sharded: the plain optimizer's reloadable at another TP, PP or
        DP size, the distributed optimizer's at another DP size), per-rank RNG (only
        meaningful at the same world size) and counters (common, saved by rank 0)."""
        from megatron.core.dist_checkpointing.mapping import ShardedObject
        if loading:
            self._init_optimizer_state()
        msd = self.model.sharded_state_dict(prefix="")
        sd = {"model": msd,
              # the plain optimizer ignores the sharding type
              "optimizer": self.optimizer.sharded_state_dict(
                  msd, is_loading=loading, metadata={"distrib_optim_sharding_type": DIST_OPT_SHARDING}),
              "counters": {"steps": self.steps, "nonfinite_steps": self.nonfinite_steps,
                           "world": self.world, "tp": self.tp, "pp": self.pp,
                           "distributed_optimizer": bool(self._dist_optimizers())}}
        if rng:
            sd["rng"] = ShardedObject("rng_state", self._rng_state(), (self.world,),
                                      (self.rank,), replica_id=0)
        return sd

    @megatron_shim.on_any_thread
    def save_checkpoint(self, ckpt_dir: str, async_save: bool = False,
                        optimizer: bool = True, thread_writer: Optional[bool] = None) -> float:
        """Save through `dist_checkpointing` (collective; resharding-capable): model and,
        by default, optimizer state, per-rank RNG and step counters.

        `async_save`: only the planning runs here; the write runs in a forked process
        (megatron's async strategy) while training goes on; `poll_checkpoints` finalises
        it. `thread_writer`: the write runs on a thread of this process (ckpt_writer.py)
        instead of a forked one (default: on a CPU trainer); the first asynchronous save
        decides for the trainer's life. Returns the seconds this call blocked (the stall)."""
        from megatron.core import dist_checkpointing
        t0 = time.perf_counter()
        os.makedirs(ckpt_dir, exist_ok=True)
        sd = self._sharded_state() if optimizer else {"model": self.model.sharded_state_dict(prefix="")}
        if not async_save:
            dist_checkpointing.save(sd, ckpt_dir)
            return time.perf_counter() - t0
        from megatron.core.dist_checkpointing.strategies import filesystem_async
        from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue
        from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy

        from .ckpt_writer import ThreadCallsQueue
        if self._ckpt_queue is None:
            thread = self.device.type == "cpu" if thread_writer is None else thread_writer
            self._ckpt_queue = ThreadCallsQueue() if thread else AsyncCallsQueue()
            # One writer per rank; the save plan (a collective) is computed once and reused
            # while the state's structure stays the same: most of the stall is that plan.
            self._ckpt_strategy = TorchDistSaveShardedStrategy("torch_dist", 1, thread_count=1,
                                                               cached_metadata=True)
        # Once megatron validated its cached plan (same structure on every rank, a flag all
        # ranks agree on), it reuses that plan without re-planning; the sharding-integrity
        # check (an all-gather of every shard's metadata) would only repeat what the first
        # save checked.
        req = dist_checkpointing.save(
            sd, ckpt_dir, sharded_strategy=self._ckpt_strategy, async_sharded_save=True,
            validate_access_integrity=not self._ckpt_strategy.validated_cache_reuse)
        fill = self.fault is not None and self.fault.fires("enospc")
        # an injected full disk (faults.py) is in place for this save's writer only: around
        # its thread, or across the fork, which keeps it
        full = faults.full_disk(filesystem_async, "_write_item") if fill else contextlib.nullcontext()
        if isinstance(self._ckpt_queue, ThreadCallsQueue):
            self._ckpt_queue.around, full = full, contextlib.nullcontext()
        with full:
            self._ckpt_pending[self._ckpt_queue.schedule_async_request(req)] = ckpt_dir
        return time.perf_counter() - t0

    @megatron_shim.on_any_thread
    def poll_checkpoints(self, blocking: bool = False) -> list[tuple[str, Optional[str]]]:
        """Finalise finished asynchronous saves (collective; call on every rank together).
        Returns (directory, None) per finalised save and (directory, why) per save whose
        write failed (a full disk: megatron raises the same CheckpointException on every
        rank, and that save is dropped), oldest first. `blocking` waits for all of them."""
        if self._ckpt_queue is None or not self._ckpt_pending:
            return []
        if not blocking:
            # megatron asks `Process.is_alive()`, which never turns False where SIGCHLD is
            # ignored (Ray workers: the kernel reaps the writer, waitpid fails, multiprocessing
            # reports "alive"). So: did this rank's oldest writer exit? then agree over ranks.
            busy = torch.tensor([0.0 if _writer_exited(self._ckpt_queue) else 1.0])
            torch.distributed.all_reduce(busy, op=torch.distributed.ReduceOp.MAX)
            if busy.item() > 0:
                return []
        from torch.distributed.checkpoint.api import CheckpointException
        out: list[tuple[str, Optional[str]]] = []
        while self._ckpt_pending:
            try:
                done = self._ckpt_queue.maybe_finalize_async_calls(blocking=True)
            except CheckpointException as e:
                # the failed call is the last one megatron took off its queue; those before
                # it in this pass were finalised
                left = {c.call_idx for c in self._ckpt_queue.async_calls}
                taken = [i for i in sorted(self._ckpt_pending) if i not in left]
                out += [(self._ckpt_pending.pop(i), None) for i in taken[:-1]]
                out.append((self._ckpt_pending.pop(taken[-1]), _write_failure(e)))
                continue
            out += [(self._ckpt_pending.pop(i), None) for i in done]
            break
        return out

    @staticmethod
    def prewarm_async_checkpointing() -> None:
        """Start megatron's writer result queue (a spawned manager process, ~2-5 s) now, so
        the first asynchronous save does not stall training for it."""
        from megatron.core.dist_checkpointing.strategies import filesystem_async
        filesystem_async._get_write_results_queue()

    def _check_optimizer_layout(self, counters: dict, ckpt_dir: str) -> None:
        from yatt.core.errors import InputError
        why = _layout_error(counters, bool(self._dist_optimizers()), self.tp, self.pp)
        if why is not None:
            raise InputError(why, file=ckpt_dir)

    def _load_snapshot_checkpoint(self, ckpt_dir: str) -> bool:
        """Load this rank's file of a snapshot checkpoint (nodes.py: written when a node was
        lost for good); False if `ckpt_dir` is a `dist_checkpointing` one. It holds every
        rank's complete state, so it loads only at the saving TP, PP and DP sizes."""
        names = _snapshot_files(ckpt_dir)
        if not names:
            return False
        if len(names) != self.world:
            from yatt.core.errors import InputError
            raise InputError(f"holds the state of {len(names)} trainer ranks (a snapshot "
                             f"checkpoint, written when a node was lost); allowed: a plan "
                             f"whose trainer has {len(names)} ranks (this one: {self.world})",
                             field="--resume", file=str(ckpt_dir))
        self.restore(safe_load.torch_load(os.path.join(ckpt_dir, nodes.snapshot_name(self.rank))))
        return True

    @megatron_shim.on_any_thread
    @torch.no_grad()   # fp32 main parameters are views of the model's leaf parameters
    def load_checkpoint(self, ckpt_dir: str, optimizer: Optional[bool] = None) -> None:
        """Load a `save_checkpoint` directory into this rank: weights at any TP/PP size.
        `optimizer`: also restore optimizer state, RNG and counters (default: if the
        checkpoint has them); distributed-optimizer state needs the saving TP and PP sizes
        and the same optimizer kind (else an InputError naming the checkpoint)."""
        from megatron.core import dist_checkpointing
        safe_load.install()   # torch's and megatron's loaders: tensors and plain data only
        if self._load_snapshot_checkpoint(ckpt_dir):
            return
        counters = _saved_counters(ckpt_dir)
        if optimizer is None:
            optimizer = counters is not None
        same_world = counters is not None and counters.get("world") == self.world
        if optimizer and counters is not None:
            self._check_optimizer_layout(counters, ckpt_dir)
        if optimizer:
            sd = dist_checkpointing.load(self._sharded_state(loading=True, rng=same_world), ckpt_dir)
        else:
            sd = dist_checkpointing.load({"model": self.model.sharded_state_dict(prefix="")}, ckpt_dir)
        self.model.load_state_dict(sd["model"], strict=False)
        if optimizer:
            self.optimizer.load_state_dict(sd["optimizer"])
            self._set_adam_steps()
            if same_world:   # RNG streams are per rank; at another world size they restart
                rng = sd["rng"]
                self._set_rng_state(rng[0] if isinstance(rng, list) else rng)
            self.steps = int(sd["counters"]["steps"])
            self.nonfinite_steps = int(sd["counters"]["nonfinite_steps"])
        else:
            self.optimizer.reload_model_params()


def _snapshot_files(ckpt_dir: str) -> list[str]:
    return sorted(n for n in os.listdir(ckpt_dir) if nodes.is_snapshot_name(n))


def _layout_error(counters: dict, distributed: bool, tp: int, pp: int) -> str | None:
    """Why optimizer state saved with `counters` cannot load into a trainer with this
    optimizer kind and TP/PP size (None: it can). Checkpoints that predate the keys pass."""
    kinds = {True: "algo.distributed_optimizer: true", False: "algo.distributed_optimizer: false"}
    saved = counters.get("distributed_optimizer")
    if saved is not None and bool(saved) != distributed:
        return (f"holds optimizer state saved with {kinds[bool(saved)]}; allowed: load it with "
                f"{kinds[bool(saved)]}, or load the weights only")
    if distributed and "tp" in counters and (counters["tp"], counters["pp"]) != (tp, pp):
        return (f"holds distributed-optimizer state saved at TP={counters['tp']} PP={counters['pp']}, "
                f"which loads only at that TP and PP (any DP size), not TP={tp} PP={pp}; "
                "allowed: the saving TP and PP, or load the weights only")
    return None


def _saved_counters(ckpt_dir: str) -> Optional[dict]:
    """The step counters saved with optimizer state (None for a weights-only checkpoint)."""
    common = os.path.join(ckpt_dir, safe_load.COMMON)
    if not os.path.exists(common):
        return None
    data = safe_load.torch_load(common)
    return data.get("counters") if isinstance(data, dict) else None


def _host_copy(x):
    """`x` with every tensor copied to host memory (nested dicts and lists)."""
    if torch.is_tensor(x):
        return x.detach().cpu().clone()
    if isinstance(x, dict):
        return {k: _host_copy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_host_copy(v) for v in x]
    return x


def _tuples(x):
    """`random.setstate` wants tuples; a checkpoint may hand back lists."""
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


def _write_failure(e: BaseException) -> str:
    """One line for a failed checkpoint write (`No space left on device: FILE, trainer rank
    R`): the first failing rank's error. The coordinator has them all; the other ranks only
    learn that a rank failed. Megatron re-raises a writer process's OSError as a
    RuntimeError carrying its text, so the errno part is read back from that text."""
    import re
    for rank, err in sorted((getattr(e, "failures", None) or {}).items()):
        exc = err[0] if isinstance(err, tuple) else err
        found = re.search(r"\[Errno \d+\] (.*?)(?:: '([^']*)')?$", str(exc).splitlines()[0])
        if isinstance(exc, OSError) and exc.strerror:
            what = exc.strerror + (f": {os.path.basename(str(exc.filename))}" if exc.filename else "")
        elif found:
            what = found[1] + (f": {os.path.basename(found[2])}" if found[2] else "")
        else:
            what = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return f"{what}, trainer rank {rank}"
    return "the shard write failed on another trainer rank"


def _writer_exited(queue) -> bool:
    """Whether the oldest asynchronous checkpoint writer (thread or process) of `queue` has
    finished."""
    from .ckpt_writer import ThreadAsyncCaller
    caller = queue.async_calls[0].async_caller if queue.async_calls else None
    if isinstance(caller, ThreadAsyncCaller):
        return caller.done()
    proc = getattr(caller, "process", None)
    if proc is None:
        return True
    return not proc.is_alive() or not os.path.exists(f"/proc/{proc.pid}")
