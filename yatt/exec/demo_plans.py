"""Plans for the CPU demo experiment (2 devices), one per placement mode.

Why: tests, the controllers benchmark and `yatt run` on an experiment file without a
planner need a valid plan for a small cluster: colocate puts every role on every device;
partial gives the first half of the devices to rollout and the rest to the GenRM.
"""
from __future__ import annotations

from yatt.core.layout import make_plan
from yatt.core.plan import Experiment, Plan
from yatt.core.roles import Mode, ReleasePolicy


def demo_plan(exp: Experiment, mode: Mode, *, release: ReleasePolicy = ReleasePolicy.TEARDOWN,
              controllers: int = 1) -> Plan:
    """The demo's plan for `mode` (TP 1 everywhere), built by the shared `make_plan`."""
    n = exp.cluster.num_gpus
    if mode is Mode.PARTIAL and n < 2:
        raise ValueError("partial colocate needs at least 2 devices")
    return make_plan(exp, mode, rollout_devices=n // 2 if mode is Mode.PARTIAL else None,
                     release=release, controllers=controllers)
