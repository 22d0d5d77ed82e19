"""Small Ray helpers shared by the step runner, controllers and the supervisor.

Why: `ray.get(list)` waits for every task, so when one trainer rank dies its peers stay
blocked in a collective and the driver hangs with them. Failing fast on the first error
is what lets fault recovery (supervisor.py) start at all, and recovery then waits for
Ray to bring the restarted actors back (`wait_alive`).
"""
from __future__ import annotations

import time


def get_all(refs: list) -> list:
    """`ray.get` that fails fast: the first failed task raises at once."""
    import ray

    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        ray.get(done)
    return ray.get(list(refs))


def wait_alive(handles: list, fresh: bool = False, timeout_s: float = 600.0) -> None:
    """Block until every actor answers `ping` (Ray restarts a dead one in the background;
    calls to it fail with ActorUnavailableError meanwhile). `fresh`: until each answers from
    a new incarnation (trainers: no Megatron state yet), i.e. after its kill took effect."""
    import ray
    from ray.exceptions import RayActorError

    deadline = time.monotonic() + timeout_s
    todo = list(handles)
    while todo:
        left = []
        for h in todo:
            try:
                blank = ray.get(h.ping.remote(), timeout=60)
                if fresh and not blank:
                    left.append(h)
            except (RayActorError, ray.exceptions.GetTimeoutError):
                left.append(h)
        if left and time.monotonic() > deadline:
            raise TimeoutError(f"{len(left)} actor(s) did not come back within {timeout_s:.0f} s")
        todo = left
        if todo:
            time.sleep(0.2)


def is_actor_fault(e: BaseException) -> bool:
    """An actor died (or is restarting) under the call."""
    from ray.exceptions import RayActorError
    return isinstance(e, RayActorError)
