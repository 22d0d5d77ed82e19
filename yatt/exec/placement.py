"""Ray placement groups built from a Plan: plan devices → bundles, roles → actor options.

Why: a Plan names logical devices (0..N-1, `gpus_per_node` per node). The executor must
put each role's actors on exactly those devices, and a TP group must never span nodes.
We create one STRICT_PACK placement group per plan node (bundles = that node's devices,
`{"GPU": 1}` each): STRICT_PACK keeps every bundle of a plan node on one Ray node, and
the Plan already guarantees a TP group sits inside one plan node, so no TP group can span
Ray nodes. On a single-node plan that is exactly one placement group for the plan.

Roles sharing a device (full colocate) share its bundle with fractional GPU requests
(1/k for k roles), which is also what makes real CUDA_VISIBLE_DEVICES right on GPUs.

Joining an existing cluster: start Ray on each node (`ray start --head --num-gpus=8`,
`ray start --address=HEAD:6379 --num-gpus=8`), then `run_plan(..., ray_address="HEAD:6379")`
(`yatt run --address HEAD:6379`). Each Ray node must offer at least `gpus_per_node` GPUs.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from yatt.core.plan import Plan
from yatt.core.roles import Role


@dataclass(frozen=True)
class Slot:
    """Where a plan device lives: the placement group (by plan node) and bundle index."""

    device: int
    node: int
    bundle: int


def device_slots(plan: Plan) -> dict[int, Slot]:
    """Pure: map every device the plan uses to (plan node, bundle index in that node's PG)."""
    used = sorted({d for p in plan.placements for d in p.devices})
    per_node: Counter[int] = Counter()
    out = {}
    for d in used:
        node = plan.cluster.node_of(d)
        out[d] = Slot(d, node, per_node[node])
        per_node[node] += 1
    return out


def device_sharing(plan: Plan) -> dict[int, int]:
    """How many roles use each device (a device's bundle is split among them)."""
    c: Counter[int] = Counter()
    for p in plan.placements:
        for d in p.devices:
            c[d] += 1
    return dict(c)


class Placement:
    """The plan's placement groups; hands out actor options pinned to plan devices."""

    def __init__(self, plan: Plan, env: dict[str, str], timeout_s: float = 120.0):
        import ray
        from ray.util.placement_group import placement_group

        self.plan = plan
        self.env = dict(env)
        self.slots = device_slots(plan)
        self.sharing = device_sharing(plan)
        nodes = sorted({s.node for s in self.slots.values()})
        self.groups: dict[int, Any] = {}
        for n in nodes:
            k = sum(1 for s in self.slots.values() if s.node == n)
            self.groups[n] = placement_group([{"GPU": 1} for _ in range(k)],
                                             strategy="STRICT_PACK", name="")
        try:
            ray.get([pg.ready() for pg in self.groups.values()], timeout=timeout_s)
        except Exception as e:
            gpus = ray.cluster_resources().get("GPU", 0)
            self.remove()
            raise RuntimeError(
                f"could not place plan '{plan.describe()}' within {timeout_s:.0f}s: it needs "
                f"{len(self.slots)} devices as {len(nodes)} node(s) of up to "
                f"{plan.cluster.gpus_per_node}; the Ray cluster has {gpus:g} GPUs in all "
                f"(each Ray node must hold a whole plan node) [{type(e).__name__}]") from None

    def options(self, device: int, *, share: float | None = None, **extra: Any) -> dict:
        """`.options(...)` for an actor pinned to `device` (its share of the bundle)."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        slot = self.slots[device]
        frac = share if share is not None else 1.0 / self.sharing[device]
        frac = int(frac * 10_000) / 10_000
        return dict(num_cpus=0, num_gpus=frac, runtime_env={"env_vars": self.env},
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=self.groups[slot.node],
                        placement_group_bundle_index=slot.bundle),
                    **extra)

    def engine_options(self, group: tuple[int, ...], cpu: bool) -> dict:
        """`.options(...)` for the engine actor serving one TP group (`group`: its devices).

        The actor sits on the group's first device. At TP > 1 its vLLM workers take the
        rest: on CPU they are child processes of the actor (same node, which the Plan
        guarantees for a TP group), so the group's other bundles stay reserved for them;
        on GPU vLLM's ray executor starts one worker per bundle of the group
        (`VLLM_RAY_BUNDLE_INDICES`, each taking the role's share of its device) and the
        actor itself holds no device.
        """
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        opts = self.options(group[0])
        if len(group) == 1 or cpu:
            return opts
        slots = [self.slots[d] for d in group]
        share = min(int(10_000 / self.sharing[d]) / 10_000 for d in group)
        env = {**self.env, "VLLM_RAY_BUNDLE_INDICES": ",".join(str(s.bundle) for s in slots),
               "VLLM_RAY_PER_WORKER_GPUS": str(share)}
        opts.update(num_gpus=0, runtime_env={"env_vars": env},
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=self.groups[slots[0].node],
                        placement_group_bundle_index=slots[0].bundle,
                        placement_group_capture_child_tasks=True))
        return opts

    def role_options(self, role: Role) -> list[dict]:
        """One options dict per device of the role, in plan order."""
        return [self.options(d) for d in self.plan.placement(role).devices]

    def bundle_nodes(self) -> dict[int, str]:
        """Ray node id hosting each plan device (for checks and the trace)."""
        from ray.util.placement_group import placement_group_table

        out = {}
        for d, s in self.slots.items():
            table = placement_group_table(self.groups[s.node])
            out[d] = table["bundles_to_node_id"][s.bundle]
        return out

    def remove(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for pg in self.groups.values():
            try:
                remove_placement_group(pg)
            except Exception:
                pass
        self.groups = {}
