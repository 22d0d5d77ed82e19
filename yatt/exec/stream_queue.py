"""A bounded queue of batches between engine actors, drained whole.

Why: `ray.util.queue.Queue` hands a consumer one item per `get` round trip. A GenRM fed by
rollout engines that finish a batch every engine step then makes one judge call per batch,
and each call costs its process time (tokenising, adding requests, one Ray reply) on the
GenRM's core. `get_all` returns every batch queued since the last one (waiting for the first),
so a consumer that was busy stepping its engine submits what piled up as one call. Puts
block while `maxsize` batches wait, as the rollout's backpressure.
"""
from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Optional


class _QueueActor:
    """The queue's state, in one async actor (puts and gets interleave on its event loop)."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.items: deque = deque()
        self.changed = asyncio.Condition()

    async def put(self, item: Any) -> None:
        async with self.changed:
            await self.changed.wait_for(
                lambda: self.maxsize <= 0 or len(self.items) < self.maxsize)
            self.items.append(item)
            self.changed.notify_all()

    async def get_all(self) -> list:
        async with self.changed:
            await self.changed.wait_for(lambda: bool(self.items))
            out = list(self.items)
            self.items.clear()
            self.changed.notify_all()
            return out

    def qsize(self) -> int:
        return len(self.items)


class StreamQueue:
    """The handle engine actors share (it pickles as its actor handle): `put_async` from
    a producer's event loop, `get_all_async` (or blocking `get_all`) from the consumer."""

    def __init__(self, maxsize: int = 0, actor_options: Optional[dict] = None) -> None:
        import ray

        self.actor = ray.remote(_QueueActor).options(**(actor_options or {})).remote(maxsize)

    async def put_async(self, item: Any) -> None:
        await self.actor.put.remote(item)

    async def get_all_async(self) -> list:
        return await self.actor.get_all.remote()

    def get_all(self, timeout: Optional[float] = None) -> list:
        import ray

        return ray.get(self.actor.get_all.remote(), timeout=timeout)

    def qsize(self) -> int:
        import ray

        return ray.get(self.actor.qsize.remote())
