"""Small Ray helpers shared by the step runner, controllers and the supervisor.

Why: `ray.get(list)` waits for every task, so when one trainer rank dies its peers stay
blocked in a collective and the driver hangs with them. Failing fast on the first error
is what lets fault recovery (supervisor.py) start at all.
"""
from __future__ import annotations


def get_all(refs: list) -> list:
    """`ray.get` that fails fast: the first failed task raises at once."""
    import ray

    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        ray.get(done)
    return ray.get(list(refs))
