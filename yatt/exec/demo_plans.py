"""Hand-built plans for the CPU demo experiment (2 devices), one per placement mode.

Why: tests, the controllers benchmark and `yatt run` on an experiment file without a
planner need a valid plan for a small cluster. These follow the issue's examples:
colocate puts every role on every device; partial splits rollout and GenRM.
"""
from __future__ import annotations

from yatt.core.plan import Experiment, Plan, RolePlacement
from yatt.core.roles import Mode, ReleasePolicy, Role


def demo_plan(exp: Experiment, mode: Mode, *, release: ReleasePolicy = ReleasePolicy.TEARDOWN,
              controllers: int = 1) -> Plan:
    """Colocate: all roles on all devices. Partial: rollout on the first half of the
    devices, GenRM on the rest; trainer and reference on all."""
    n = exp.cluster.num_gpus
    every = tuple(range(n))
    if mode is Mode.COLOCATE:
        gen = {Role.ROLLOUT: every, Role.GENRM: every}
    else:
        if n < 2:
            raise ValueError("partial colocate needs at least 2 devices")
        gen = {Role.ROLLOUT: every[:n // 2], Role.GENRM: every[n // 2:]}
    places = [RolePlacement(Role.ROLLOUT, gen[Role.ROLLOUT])]
    if exp.genrm is not None:
        places.append(RolePlacement(Role.GENRM, gen[Role.GENRM]))
    places += [RolePlacement(Role.TRAINER, every), RolePlacement(Role.REFERENCE, every)]
    return Plan(mode, tuple(places), exp, release=release, controllers=controllers)
