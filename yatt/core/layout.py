"""`make_plan`: build a valid Plan for a mode from an Experiment and a few knobs.

Why: the planner's search, the executor's demo plans, tests and benchmarks all need
Plans; spelling out the RolePlacements by hand is error-prone (roles that must exist,
disjoint sets in partial colocate, TP groups inside a node). Pure; lives in core so the
simulator and the executor share it.
"""
from __future__ import annotations

from typing import Optional

from .errors import InputError
from .plan import Experiment, Plan, RolePlacement
from .roles import BalanceCost, BalancePolicy, Mode, ReleasePolicy, Role


def make_plan(experiment: Experiment, mode: Mode, *, rollout_devices: Optional[int] = None,
              rollout_tp: int = 1, genrm_tp: int = 1, trainer_tp: int = 1, trainer_pp: int = 1,
              reference_tp: Optional[int] = None, reference_pp: Optional[int] = None,
              balance: Optional[BalancePolicy] = None, balance_cost: Optional[BalanceCost] = None,
              release: Optional[ReleasePolicy] = None, controllers: Optional[int] = None,
              genrm_devices: int = 0, max_staleness: int = 1) -> Plan:
    """A Plan for `mode` on the whole cluster.

    colocate: every role on every device. partial: rollout on the first `rollout_devices`
    devices, GenRM on the rest; trainer and reference always on every device.
    `rollout_devices` defaults to half the cluster in partial (ignored in colocate).
    The trainer runs `trainer_tp` x `trainer_pp` per model replica. The reference (an
    inference-only copy of the actor) uses `reference_tp` x `reference_pp`, by default the
    trainer's TP and PP. Policies default to the experiment's SearchSpec. Raises InputError for an
    invalid split.
    async: rollout on the first `rollout_devices` devices (default: half), the GenRM on the
    next `genrm_devices` (0: on the rollout's devices), trainer and reference on the rest;
    `max_staleness` bounds the weight lag.
    """
    n = experiment.cluster.num_gpus
    has_genrm = experiment.algo.reward.needs_genrm
    if mode is Mode.ASYNC:
        rollout, genrm, trainer = _async_devices(n, rollout_devices, genrm_devices if has_genrm else 0)
    else:
        rollout = genrm = trainer = tuple(range(n))
        if mode is Mode.PARTIAL and has_genrm:
            r = n // 2 if rollout_devices is None else rollout_devices
            if not 0 < r < n:
                raise InputError(f"got {r}; allowed: 1..{n - 1} rollout devices in partial colocate",
                                 field="rollout_devices")
            rollout, genrm = trainer[:r], trainer[r:]
    places = [RolePlacement(Role.ROLLOUT, rollout, tp=rollout_tp),
              RolePlacement(Role.TRAINER, trainer, tp=trainer_tp, pp=trainer_pp)]
    if has_genrm:
        places.append(RolePlacement(Role.GENRM, genrm, tp=genrm_tp))
    if experiment.algo.use_reference:
        places.append(RolePlacement(Role.REFERENCE, trainer,
                                    tp=trainer_tp if reference_tp is None else reference_tp,
                                    pp=trainer_pp if reference_pp is None else reference_pp))
    s = experiment.search
    return Plan(mode=mode, placements=tuple(places), experiment=experiment,
                balance=s.balance if balance is None else balance,
                balance_cost=s.balance_cost if balance_cost is None else balance_cost,
                controllers=s.controllers if controllers is None else controllers,
                release=s.release if release is None else release,
                max_staleness=max_staleness if mode is Mode.ASYNC else 1)


def _async_devices(n: int, rollout_devices: Optional[int], g: int
                   ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(rollout, genrm, trainer) devices of an async plan: rollout first, the GenRM's own
    `g` devices next (0: on the rollout's), the trainer on the rest."""
    r = n // 2 if rollout_devices is None else rollout_devices
    if not 0 < r or r + g >= n or g < 0:
        raise InputError(f"got {r} rollout + {g} genrm devices of {n}; allowed: at least one "
                         "device left for the trainer in async mode", field="rollout_devices")
    rollout = tuple(range(r))
    return rollout, (tuple(range(r, r + g)) if g else rollout), tuple(range(r + g, n))
