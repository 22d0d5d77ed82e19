"""Asynchronous checkpoint writes on a thread of the trainer's own process (CPU trainers).

Why: megatron's asynchronous save forks the trainer twice per checkpoint (a proxy process,
then one writer per bucket). A forked CPU trainer copies the page tables of a process that
holds torch, Megatron and the model, and every page the next step writes is then copied on
write while the children live; on two shared cores that cost the step after a checkpoint
a fifth of its time, for a write of a few MB. Here the save's tensors are copied once (a
CPU trainer's tensors are its live parameters and optimizer state, which the next step
changes) and one thread writes them with megatron's own per-bucket writer, into megatron's
results queue; planning, finalisation and the collective that agrees on each finished call
stay megatron's (`AsyncCallsQueue`). The results go through a queue of this process, not
megatron's default Manager queue: that one is served by a spawned process which takes
seconds of CPU to start and held up the first finalisation by as much. On a GPU the fork
path stays: its preload already copies the tensors to host memory. megatron offers no
thread caller (its persistent worker is a spawned process that would receive the tensors
through shared memory).
"""
from __future__ import annotations

import contextlib
import queue
import threading
from typing import Any, ContextManager, Optional

from megatron.core.dist_checkpointing.strategies import filesystem_async
from megatron.core.dist_checkpointing.strategies.async_utils import (
    AsyncCaller,
    AsyncCallsQueue,
    AsyncRequest,
)
from megatron.core.dist_checkpointing.strategies.filesystem_async import FileSystemWriterAsync


def _copied(buckets: list) -> list:
    """The write buckets with every tensor copied to fresh host memory."""
    return [(file, key, (data, [(item, t.detach().to("cpu", copy=True)) for item, t in tensors]))
            for file, key, (data, tensors) in buckets]


def _write(transform_list: Any, buckets: list, results: Any, around: ContextManager) -> None:
    """Write each bucket in turn (megatron's writer, fsync included) and put the same result
    megatron's forked writer puts: {bucket index: write results} or the first exception."""
    out: Any = {}
    local: queue.Queue = queue.Queue()
    count: queue.Queue = queue.Queue()      # megatron's writer marks its task done here
    try:
        with around:
            for i, bucket in enumerate(buckets):
                count.put(i)
                FileSystemWriterAsync.write_preloaded_data(transform_list, i, bucket, local, count,
                                                           use_fsync=True)
                idx, res = local.get()
                if isinstance(res, Exception):
                    out = res
                    break
                out[idx] = res
    except Exception as e:   # the queue carries it to the finalisation, as a writer's would
        out = e
    results.put(out)


class ThreadAsyncCaller(AsyncCaller):
    """One asynchronous save, written by a daemon thread (megatron's AsyncCaller contract)."""

    def __init__(self, around: Optional[ContextManager] = None) -> None:
        self.thread: Optional[threading.Thread] = None
        self.around = around if around is not None else contextlib.nullcontext()

    def schedule_async_call(self, async_req: AsyncRequest) -> None:
        if async_req.async_fn is None:
            return
        # async_fn = partial(write_preloaded_data_multiproc, transform_list, use_msc) with
        # (rank, write_buckets, results_queue): megatron 0.16's FileSystemWriterAsync
        transform_list = async_req.async_fn.args[0]
        _rank, buckets, results = async_req.async_fn_args
        self.thread = threading.Thread(
            target=_write, args=(transform_list, _copied(buckets), results, self.around),
            name="yatt-ckpt-writer", daemon=True)
        self.thread.start()

    def done(self) -> bool:
        return self.thread is None or not self.thread.is_alive()

    def is_current_async_call_done(self, blocking: bool = False, no_dist: bool = False) -> bool:
        is_done = self.done() if no_dist else self.sync_all_async_calls(int(not self.done()))
        if is_done or blocking:
            self.close()
            is_done = True
        return is_done

    def close(self, abort: bool = False) -> None:
        if self.thread is not None and not abort:
            self.thread.join()
        self.thread = None

    def __del__(self) -> None:   # megatron's base raises here; a daemon thread needs nothing
        pass


class ThreadCallsQueue(AsyncCallsQueue):
    """megatron's queue of asynchronous saves, each written by a ThreadAsyncCaller.
    `around`, if set, wraps the next scheduled write only (fault injection: a full disk)."""

    def __init__(self) -> None:
        super().__init__(persistent=False)
        self.around: Optional[ContextManager] = None
        # megatron's writers put their results in one module-level queue, made on first use
        # as a Manager queue unless set: a queue of this process is all a thread needs
        if filesystem_async._results_queue is None:
            filesystem_async._results_queue = queue.Queue()

    def _get_async_caller(self) -> AsyncCaller:
        caller, self.around = ThreadAsyncCaller(self.around), None
        return caller
