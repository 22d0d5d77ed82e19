"""Phase hand-offs both step models charge: a release/reload switch of the roles sharing
devices, and the trainer -> engines weight push (all at once, or the two sides of an async
push).

Why apart: the SimPy simulation (`simulate`) and the fluid model (`fluid`) price these the
same way; neither should import the other for them.
"""
from __future__ import annotations

from yatt.core import CostModel, Phase, Plan, Role, SpanRecord
from yatt.core.schedule import Stage

from .contention import slowdown


def switch(plan: Plan, cost: CostModel, stage: Stage, now: float, work_end: dict[Role, float],
           step: int, spans: list) -> float:
    """Cost a switch stage; roles on shared devices go one after another. Returns its end.
    Every device whose role has a non-zero switch counts as busy for contention (the
    executor starts the switches of a stage together). An early-release stage starts each
    role at its own `work_end`."""
    free: dict[int, float] = {}
    end = now
    costs: dict[Role, float] = {}
    for role in stage.roles:
        if not plan.has(role):
            continue
        pl, model = plan.placement(role), plan.model_for(role)
        if stage.phase is Phase.OFFLOAD:
            costs[role] = cost.offload_time(model, role, pl.parallel, plan.release)
        else:
            costs[role] = cost.reload_time(model, role, pl.parallel, plan.release)
    busy = len({d for r, c in costs.items() if c > 0 for d in plan.placement(r).devices})
    k = slowdown(cost, stage.phase, busy)
    for role, c in costs.items():
        pl = plan.placement(role)
        c *= k
        t0 = work_end.get(role, now) if stage.early_release else now
        t0 = max([t0] + [free[d] for d in pl.devices if d in free])
        spans.append(SpanRecord(step=step, role=role, phase=stage.phase, devices=pl.devices,
                                start_s=t0, end_s=t0 + c, name=f"{stage.phase.value} {role.value}"))
        for d in pl.devices:
            free[d] = t0 + c
        end = max(end, t0 + c)
    return end


def sync_cost(plan: Plan, cost: CostModel) -> float:
    """One trainer -> engines weight push (the cost model's weight-sync term)."""
    tr, ro = plan.placement(Role.TRAINER), plan.placement(Role.ROLLOUT)
    devs = set(tr.devices) | set(ro.devices)
    cross = len({plan.cluster.node_of(d) for d in devs}) > 1
    return cost.weight_sync_time(plan.experiment.actor, tr.parallel, ro.tp, ro.dp, cross)


def publish_weights(plan: Plan, cost: CostModel, now: float, step: int, spans: list) -> float:
    """Async: the trainer's side of a weight push (its devices); returns the end."""
    c = sync_cost(plan, cost)
    devs = plan.placement(Role.TRAINER).devices
    spans.append(SpanRecord(step=step, role=Role.TRAINER, phase=Phase.WEIGHT_SYNC,
                            devices=devs, start_s=now, end_s=now + c, name="weight_sync send"))
    return now + c


def take_weights(plan: Plan, cost: CostModel, now: float, step: int, spans: list) -> float:
    """Async: the engines' side of a weight push, between two of their steps; returns the end."""
    c = sync_cost(plan, cost)
    devs = plan.placement(Role.ROLLOUT).devices  # the GenRM keeps its own weights
    spans.append(SpanRecord(step=step, role=Role.ROLLOUT, phase=Phase.WEIGHT_SYNC,
                            devices=devs, start_s=now, end_s=now + c, name="weight_sync receive"))
    return now + c


def weight_sync(plan: Plan, cost: CostModel, now: float, step: int, spans: list) -> float:
    """Push the trainer's weights into the rollout engines; returns the end."""
    tr, ro = plan.placement(Role.TRAINER), plan.placement(Role.ROLLOUT)
    devs = tuple(sorted(set(tr.devices) | set(ro.devices)))
    cross = len({plan.cluster.node_of(d) for d in devs}) > 1
    c = cost.weight_sync_time(plan.experiment.actor, tr.parallel, ro.tp, ro.dp, cross)
    spans.append(SpanRecord(step=step, role=Role.TRAINER, phase=Phase.WEIGHT_SYNC,
                            devices=devs, start_s=now, end_s=now + c, name="weight_sync"))
    return now + c
