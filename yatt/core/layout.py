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
    everything = tuple(range(n))
    has_genrm = experiment.algo.reward.needs_genrm
    if mode is Mode.ASYNC:
        return _async_plan(experiment, n, rollout_devices, genrm_devices, rollout_tp, genrm_tp,
                           trainer_tp, trainer_pp, reference_tp, reference_pp, max_staleness,
                           balance, balance_cost, release, controllers)
    if mode is Mode.PARTIAL and has_genrm:
        r = n // 2 if rollout_devices is None else rollout_devices
        if not 0 < r < n:
            raise InputError(f"got {r}; allowed: 1..{n - 1} rollout devices in partial colocate",
                             field="rollout_devices")
        rollout, genrm = everything[:r], everything[r:]
    else:
        rollout = genrm = everything
    places = [RolePlacement(Role.ROLLOUT, rollout, tp=rollout_tp),
              RolePlacement(Role.TRAINER, everything, tp=trainer_tp, pp=trainer_pp)]
    if has_genrm:
        places.append(RolePlacement(Role.GENRM, genrm, tp=genrm_tp))
    if experiment.algo.use_reference:
        places.append(RolePlacement(Role.REFERENCE, everything,
                                    tp=trainer_tp if reference_tp is None else reference_tp,
                                    pp=trainer_pp if reference_pp is None else reference_pp))
    s = experiment.search
    return Plan(mode=mode, placements=tuple(places), experiment=experiment,
                balance=s.balance if balance is None else balance,
                balance_cost=s.balance_cost if balance_cost is None else balance_cost,
                controllers=s.controllers if controllers is None else controllers,
                release=s.release if release is None else release)


def _async_plan(exp: Experiment, n: int, rollout_devices: Optional[int], genrm_devices: int,
                rollout_tp: int, genrm_tp: int, trainer_tp: int, trainer_pp: int,
                reference_tp: Optional[int], reference_pp: Optional[int], max_staleness: int,
                balance, balance_cost, release, controllers) -> Plan:
    has_genrm = exp.algo.reward.needs_genrm
    r = n // 2 if rollout_devices is None else rollout_devices
    g = genrm_devices if has_genrm else 0
    if not 0 < r or r + g >= n or g < 0:
        raise InputError(f"got {r} rollout + {g} genrm devices of {n}; allowed: at least one "
                         "device left for the trainer in async mode", field="rollout_devices")
    rollout = tuple(range(r))
    genrm = tuple(range(r, r + g)) if g else rollout
    trainer = tuple(range(r + g, n))
    places = [RolePlacement(Role.ROLLOUT, rollout, tp=rollout_tp),
              RolePlacement(Role.TRAINER, trainer, tp=trainer_tp, pp=trainer_pp)]
    if has_genrm:
        places.append(RolePlacement(Role.GENRM, genrm, tp=genrm_tp))
    if exp.algo.use_reference:
        places.append(RolePlacement(Role.REFERENCE, trainer,
                                    tp=trainer_tp if reference_tp is None else reference_tp,
                                    pp=trainer_pp if reference_pp is None else reference_pp))
    s = exp.search
    return Plan(mode=Mode.ASYNC, placements=tuple(places), experiment=exp,
                balance=s.balance if balance is None else balance,
                balance_cost=s.balance_cost if balance_cost is None else balance_cost,
                controllers=s.controllers if controllers is None else controllers,
                release=s.release if release is None else release, max_staleness=max_staleness)
