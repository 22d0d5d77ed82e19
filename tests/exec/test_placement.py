"""Placement groups from a Plan: devices → bundles, TP groups never span nodes."""
from __future__ import annotations

import dataclasses

import pytest

from yatt.core.plan import Plan, RolePlacement
from yatt.core.roles import Mode, ReleasePolicy, Role
from yatt.exec.placement import device_sharing, device_slots


def _plan(exp, nodes: int, per_node: int, trainer_tp: int) -> Plan:
    cluster = dataclasses.replace(exp.cluster, nodes=nodes, gpus_per_node=per_node)
    exp = dataclasses.replace(exp, cluster=cluster)
    n = nodes * per_node
    every = tuple(range(n))
    return Plan(Mode.PARTIAL, (RolePlacement(Role.ROLLOUT, every[:n // 2]),
                               RolePlacement(Role.GENRM, every[n // 2:]),
                               RolePlacement(Role.TRAINER, every, tp=trainer_tp),
                               RolePlacement(Role.REFERENCE, every)), exp,
                release=ReleasePolicy.RESIDENT)


def test_device_slots_pure(demo_experiment):
    plan = _plan(demo_experiment, 2, 2, 2)
    slots = device_slots(plan)
    assert [(s.node, s.bundle) for s in slots.values()] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert device_sharing(plan) == {0: 3, 1: 3, 2: 3, 3: 3}


def test_four_devices_tp_groups_stay_on_one_node(ray_cluster, demo_experiment):
    ray = pytest.importorskip("ray")
    from yatt.exec.env import worker_env
    from yatt.exec.placement import Placement

    @ray.remote(num_cpus=0)
    class Probe:
        def where(self):
            return ray.get_runtime_context().get_node_id(), [str(g) for g in ray.get_gpu_ids()]

    plan = _plan(demo_experiment, 2, 2, trainer_tp=2)
    pl = Placement(plan, worker_env(True))
    try:
        nodes = pl.bundle_nodes()
        probes = {d: Probe.options(**pl.options(d)).remote() for d in range(4)}
        where = {d: ray.get(p.where.remote()) for d, p in probes.items()}
        for grp in plan.placement(Role.TRAINER).groups():
            assert len({where[d][0] for d in grp}) == 1, f"TP group {grp} spans nodes"
            assert len({nodes[d] for d in grp}) == 1
        # the emulated Ray nodes hold 2 GPUs each, so the two plan nodes land apart
        assert where[0][0] != where[2][0]
        assert all(len(where[d][1]) == 1 for d in range(4))
        for p in probes.values():
            ray.kill(p)
        # a TP=2 engine over the GenRM's devices (2, 3): on CPU its actor takes its share of
        # device 2 (the vLLM workers are its children); on GPU the actor holds no device and
        # vLLM's ray executor gets the group's bundles of node 1's placement group
        cpu = pl.engine_options((2, 3), cpu=True)
        assert cpu["num_gpus"] == pl.options(2)["num_gpus"]
        gpu = pl.engine_options((2, 3), cpu=False)
        env = gpu["runtime_env"]["env_vars"]
        assert gpu["num_gpus"] == 0 and env["VLLM_RAY_BUNDLE_INDICES"] == "0,1"
        assert float(env["VLLM_RAY_PER_WORKER_GPUS"]) == pytest.approx(1 / 3, abs=1e-4)
        strategy = gpu["scheduling_strategy"]
        assert strategy.placement_group == pl.groups[1]
        assert strategy.placement_group_capture_child_tasks
    finally:
        pl.remove()


def test_unplaceable_plan_fails_clearly(ray_cluster, demo_experiment):
    pytest.importorskip("ray")
    from yatt.exec.env import worker_env
    from yatt.exec.placement import Placement

    plan = _plan(demo_experiment, 1, 4, trainer_tp=1)   # a 4-device node: no Ray node has 4
    with pytest.raises(RuntimeError, match="could not place plan"):
        Placement(plan, worker_env(True), timeout_s=3)
